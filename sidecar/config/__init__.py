"""Configuration: frozen sections, read once from INFERCACHE_* variables and CLI flags.

Every setting is declared once, as a `setting()` field of a section in
`sections.py` (default, parser, one-line help); SETTINGS, the `serve` flags,
the variables and the README table are generated from those declarations.
No other module reads os.environ. Invalid values fail at start with a message
naming the variable.
"""

from sidecar.config.feature_sections import (
    GatewayConfig,
    HitsConfig,
    IdentityConfig,
    KvConfig,
    PolicyConfig,
    PrewarmConfig,
    TelemetryConfig,
)
from sidecar.config.fields import ENV_PREFIX, Setting, setting
from sidecar.config.load import (
    SECTIONS,
    SETTINGS,
    ConfigError,
    check_consistency,
    load_config,
    unknown_variables,
)
from sidecar.config.parsers import format_bytes, parse_bytes
from sidecar.config.sections import (
    DEFAULTS,
    AdminConfig,
    Config,
    FleetConfig,
    InvalidationConfig,
    LeaseConfig,
    LimitsConfig,
    RedisConfig,
    ServerConfig,
    StreamConfig,
    TiersConfig,
    TtlConfig,
)
from sidecar.config.verify_section import VerifyConfig

__all__ = [
    "DEFAULTS",
    "ENV_PREFIX",
    "SECTIONS",
    "SETTINGS",
    "AdminConfig",
    "Config",
    "ConfigError",
    "FleetConfig",
    "GatewayConfig",
    "HitsConfig",
    "IdentityConfig",
    "InvalidationConfig",
    "KvConfig",
    "LeaseConfig",
    "LimitsConfig",
    "PolicyConfig",
    "PrewarmConfig",
    "RedisConfig",
    "ServerConfig",
    "Setting",
    "StreamConfig",
    "TelemetryConfig",
    "TiersConfig",
    "TtlConfig",
    "VerifyConfig",
    "check_consistency",
    "format_bytes",
    "load_config",
    "parse_bytes",
    "setting",
    "unknown_variables",
]
