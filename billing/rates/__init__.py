"""The rate card (what a GPU-hour of each flavor costs, from a moment on) and each flavor's idle
policy: `card.RateCard` is the one read of prices every part of billing asks."""
