"""What the mirror and its users share: the exact offset map, per-partition status, the drain check."""
