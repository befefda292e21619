"""``python -m webgpu_trainer.cli ...``: the same as the ``webgpu-trainer`` command."""

import sys

from .main import main

sys.exit(main())
