"""`python -m heartlm` runs the command-line interface; torchrun's workers run it too."""

import logging
import os
import sys

from heartlm.cli import main
from heartlm.runtime import ranks

code = main()
if ranks().worker:
    # A worker that returned has closed its logs and destroyed its process group
    # (`distributed.shutdown`). What interpreter finalisation would still do is run the
    # destructors of collective objects that the model keeps alive (FSDP2's groups), and a
    # gloo rank has aborted there after a finished run ("terminate called without an active
    # exception", cf. pytorch/pytorch#179291): leave without it.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
raise SystemExit(code)
