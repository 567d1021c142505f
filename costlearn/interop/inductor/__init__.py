"""PyTorch Inductor: its autoheuristic logs imported (``autoheuristic``), its
lookup table imported and exported (``lut``) and turned on (``choices``, needs torch)."""
