"""``python -m webgpu_trainer ...``: the same as the ``webgpu-trainer`` command."""

import sys

from .cli.main import main

sys.exit(main())
