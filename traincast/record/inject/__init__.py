"""Files ``traincast record`` injects into the recorded command's processes
(:mod:`traincast.record.inject.sitecustomize`, copied into a private ``PYTHONPATH`` folder;
never imported by traincast itself)."""
