"""The mirror: offset-exact replication of topics along links, with group offset sync."""
