"""Partitions a migration moved: requests naming them split per cluster, offsets as clients see them."""
