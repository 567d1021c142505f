"""PyTorch Inductor: its autoheuristic logs imported (``autoheuristic``), its
lookup table imported and exported (``lut``, its keys ``lut_keys``) and turned
on (``choices``, needs torch); what it calls ``triton_mm``'s configs
(``names``)."""
