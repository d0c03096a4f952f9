"""Robustness under bad input and attack traffic (issue 14), against one real sidecar.

    python -m bench.robustness            # full rounds
    python -m bench.robustness --smoke    # a few seconds

Scenarios, in this order, on one `python -m sidecar serve` child (embedded stores,
admin plane with a token):

    garbage   undecodable bytes and invalid UTF-8 in every string field, to every
              method of every service: how many answers are UNKNOWN
    flood     rounds of unauthenticated 15 MiB Prewarm messages on the admin plane:
              RSS retained over the baseline (MiB) once the flood is over
    health    open Watch calls left open, then Check latency (p99, ms) beside them
    sigterm   SIGTERM with those Watches still open: the exit status within the
              grace period + 1 s ("timeout" when it did not exit)

The last line holds machine-readable key=value pairs.
"""
