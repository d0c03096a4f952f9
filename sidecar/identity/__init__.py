"""The pod's identity: its model and adapter fingerprints, the one holder every part
reads them from, their re-check when the files change, and the key resolver.

pod.PodIdentity is a frozen value; cell.IdentityCell holds the current one (and
whether it is being re-measured); watch.IdentityWatcher polls the files and swaps it;
resolver.KeyResolver builds keys with it; measure.py fingerprints the configured paths.
"""
