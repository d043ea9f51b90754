export NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-deps --no-index --break-system-packages --root-user-action=ignore .carry/wheels/*.whl .carry-ds/*.whl
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
(CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_ac.py tests/test_train.py > $OUT/gpu_tests_1.txt 2>&1) &
(timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_distributed.py -k "deepspeed and 3" > $OUT/gpu_tests_ds3.txt 2>&1) &
wait
tail -n 3 $OUT/gpu_tests_1.txt $OUT/gpu_tests_ds3.txt
echo "== AC selective at $SECONDS s"
CUDA_VISIBLE_DEVICES=0 timeout $((270 - SECONDS)) python3 benchmarks/train_bench.py --preset large --configs 1024:16 --out $OUT/ac.jsonl --variants "none:;selective:ac=selective" > $OUT/ac.log 2>&1
python3 -c "import json,sys; [print(r['variant'], r['tokens_per_s'], r['mfu'], r['max_mem_gib']) for r in map(json.loads, open(sys.argv[1]))]" $OUT/ac.jsonl
