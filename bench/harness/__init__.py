"""What every benchmark shares: server processes, client worker processes, profiling,
CPU and load readings, statistics, the report's tables and `key=value` summary line,
and the in-process ResultCache set-up."""
