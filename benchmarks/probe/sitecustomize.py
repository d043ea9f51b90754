"""Loaded by every Python process of a probe run (PYTHONPATH): SIGUSR2 dumps all threads'
stacks (heartlm itself uses SIGUSR1 to stop a run)."""

import faulthandler
import signal

faulthandler.register(signal.SIGUSR2, all_threads=True)
