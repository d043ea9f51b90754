"""The training engine that pretrain and finetune compose: data, objectives, loop, checkpoints."""
