"""The routing decision for one request, and what carries it out: holds, requests in flight, the
gateway's own refusals."""
