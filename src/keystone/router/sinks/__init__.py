"""Where outputs deliver: one module per sink type behind `base.Sink`, listed in `registry`."""
