"""GPU tests (tests/python/gpu): each module skips itself unless torch is installed and
sees a CUDA device. Run them with tests/python/gpu/run.sh on a GPU machine."""
