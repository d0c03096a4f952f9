"""The wire formats of the model-server APIs: parse a body, key its fields, render a hit,
frame its events (no I/O, no HTTP types).

The gateway (HTTP) and prewarm (replays) both read requests and answers through this
package, so the two key, judge and store the same way. Errors are domain errors
(`wire.errors.WireError`, an InvalidArgument naming the body field); only the gateway
turns them into HTTP answers.
"""
