"""PyTorch Inductor: its autoheuristic logs imported (``autoheuristic``) and
its lookup table imported and exported (``lut``); what it calls
``triton_mm``'s configs (``names``)."""
