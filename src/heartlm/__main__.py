"""`python -m heartlm` runs the command-line interface; torchrun's workers run it too."""

import logging
import os
import sys

from heartlm.cli import main
from heartlm.train.stopsignal import EXIT_STOPPED

code = main()
if "LOCAL_RANK" in os.environ and code in (0, EXIT_STOPPED):
    # A worker that finished (or stopped with a checkpoint) has closed its logs and destroyed
    # its process group (`distributed.shutdown`). What interpreter finalisation would still
    # do is run the destructors of collective objects that the model keeps alive (FSDP2's
    # groups), and a gloo rank has aborted there after a finished run ("terminate called
    # without an active exception", cf. pytorch/pytorch#179291): leave without it. A failed
    # worker exits as any process does, its exit hooks (W&B's, say) included.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
raise SystemExit(code)
