"""How the trainer reaches Temporal: the same rules as the TypeScript workers and
the CLI (src/connection/settings.ts), through the SDK's own `temporalio.envconfig`:
a temporal.toml profile, overridden by TEMPORAL_* variables, overridden by flags;
with nothing set, the local dev server (127.0.0.1:7233, namespace "default").

Bad settings fail before any connect, with the setting's name and the fix.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import ssl
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from temporalio.client import Client
from temporalio.converter import DataConverter, default as default_converter
from temporalio.envconfig import ClientConfig, ClientConfigProfile

from .codec import AesGcmCodec, CodecKeyError, codec_from_env

log = logging.getLogger("ratchet_trainer.connection")

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"
_ADDRESS_RE = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):(\d{1,5})$")
_FIX_PROFILE = "Fix: set TEMPORAL_PROFILE (or --profile) to one of the profiles in the file, or unset it to use [profile.default]"


class ConnectionConfigError(ValueError):
    """A connection setting that cannot work; the message names the setting and the fix."""


@dataclass
class Resolved:
    address: str
    namespace: str
    connect_kwargs: dict[str, Any]
    profile: str | None = None
    config_file: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    codec: AesGcmCodec | None = None

    def describe(self) -> dict[str, str]:
        """Safe to log: no key material, no API key."""
        tls = self.connect_kwargs.get("tls")
        return {
            "address": f"{self.address} ({self.sources['address']})",
            "namespace": f"{self.namespace} ({self.sources['namespace']})",
            "tls": "off" if not tls else f"on ({self.sources.get('tls', '')})",
            "profile": f"{self.profile or 'default'} from {self.config_file}" if self.config_file else "none (no temporal.toml)",
            "codec": f"AES-256-GCM, key id {self.codec.key_id}" if self.codec else "off",
            **({"api_key": f"set ({self.sources.get('api_key')})"} if "api_key" in self.connect_kwargs else {}),
        }


def config_file_path(env: Mapping[str, str]) -> str | None:
    if env.get("TEMPORAL_CONFIG_FILE"):
        return env["TEMPORAL_CONFIG_FILE"]
    if platform.system() == "Darwin":
        return str(Path(env["HOME"], "Library", "Application Support", "temporalio", "temporal.toml")) if env.get("HOME") else None
    xdg = env.get("XDG_CONFIG_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else (str(Path(env["HOME"], ".config")) if env.get("HOME") else None)
    return str(Path(base, "temporalio", "temporal.toml")) if base else None


def _check_pem(where: str, data: bytes, key: bool) -> None:
    text = data.decode("utf-8", "replace")
    marker = "PRIVATE KEY-----" if key else "-----BEGIN CERTIFICATE-----"
    if marker not in text:
        raise ConnectionConfigError(f"{where} is not a PEM {'private key' if key else 'certificate'}. Fix: point it at the right file")
    if not key:
        try:
            ssl.PEM_cert_to_DER_cert(text[text.index("-----BEGIN CERTIFICATE-----"):text.index("-----END CERTIFICATE-----") + 25])
        except ValueError as e:
            raise ConnectionConfigError(f"{where} is not a PEM certificate ({e}). Fix: point it at the right file") from None


def resolve(address: str | None = None, namespace: str | None = None, profile: str | None = None,
            env: Mapping[str, str] | None = None) -> Resolved:
    """Flags (address, namespace, profile) over TEMPORAL_* over the temporal.toml profile over the defaults."""
    env = dict(os.environ if env is None else env)
    profile_name = profile or env.get("TEMPORAL_PROFILE") or None
    file = config_file_path(env)
    used_file = file if file and Path(file).exists() else None
    if used_file is None:
        if env.get("TEMPORAL_CONFIG_FILE"):
            raise ConnectionConfigError(f"TEMPORAL_CONFIG_FILE={env['TEMPORAL_CONFIG_FILE']} does not exist. Fix: point it at a temporal.toml, or unset it")
        if profile_name:
            raise ConnectionConfigError(f'Temporal profile "{profile_name}" was asked for (TEMPORAL_PROFILE or --profile) but there is no config file '
                                        f"(looked at {file}). Fix: create it, set TEMPORAL_CONFIG_FILE, or unset TEMPORAL_PROFILE")
        file_profile = ClientConfigProfile()
    else:
        try:
            profiles = ClientConfig.load(config_source=Path(used_file), config_file_strict=True).profiles
        except Exception as e:  # the SDK's TOML errors: name the file
            raise ConnectionConfigError(f"{used_file} is not a valid temporal.toml: {e}. Fix: correct the file") from None
        if profile_name and profile_name not in profiles:
            raise ConnectionConfigError(f'Temporal profile "{profile_name}" is not in {used_file} (it has: {", ".join(sorted(profiles)) or "no profiles"}). {_FIX_PROFILE}')
        file_profile = profiles.get(profile_name or "default", ClientConfigProfile())

    try:
        merged = ClientConfigProfile.load(profile=profile_name, config_source=Path(used_file) if used_file else None,
                                          disable_file=used_file is None, override_env_vars=env)
    except Exception as e:
        raise ConnectionConfigError(f"Temporal connection settings: {e}. {_FIX_PROFILE}") from None

    in_profile = lambda key: f'{key} in profile "{profile_name or "default"}" of {used_file}'  # noqa: E731
    def source(flag: str | None, flag_name: str, env_name: str, file_value: Any, key: str) -> str:
        if flag is not None:
            return flag_name
        if env.get(env_name) is not None:
            return env_name
        return in_profile(key) if file_value is not None else "default"

    addr = address or merged.address or DEFAULT_ADDRESS
    ns = namespace or merged.namespace or DEFAULT_NAMESPACE
    sources = {
        "address": source(address, "--address", "TEMPORAL_ADDRESS", file_profile.address, "address"),
        "namespace": source(namespace, "--namespace", "TEMPORAL_NAMESPACE", file_profile.namespace, "namespace"),
    }
    if not _ADDRESS_RE.match(addr):
        raise ConnectionConfigError(f"{sources['address']}={addr!r} is not a Temporal address. Fix: host:port, e.g. 127.0.0.1:7233 (no scheme, no path)")

    kwargs: dict[str, Any] = {"target_host": addr, "namespace": ns}
    if merged.api_key is not None:
        kwargs["api_key"] = merged.api_key
        sources["api_key"] = source(None, "", "TEMPORAL_API_KEY", file_profile.api_key, "api_key")
    if merged.grpc_meta:
        kwargs["rpc_metadata"] = dict(merged.grpc_meta)
    tls = merged.tls
    if tls is not None and tls.disabled is not True:
        sources["tls"] = "TEMPORAL_TLS" if env.get("TEMPORAL_TLS") else (in_profile("[tls]") if file_profile.tls else "TEMPORAL_TLS_*")
        for attr, env_path, key, is_key in (("server_root_ca_cert", "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "tls.server_ca_cert_path", False),
                                           ("client_cert", "TEMPORAL_TLS_CLIENT_CERT_PATH", "tls.client_cert_path", False),
                                           ("client_private_key", "TEMPORAL_TLS_CLIENT_KEY_PATH", "tls.client_key_path", True)):
            src = getattr(tls, attr)
            if isinstance(src, Path):
                where = f"{env_path if env.get(env_path) else in_profile(key)}={src}"
                try:
                    data = src.read_bytes()
                except OSError as e:
                    raise ConnectionConfigError(f"{where} cannot be read ({e.strerror}). Fix: point it at the PEM file, or unset it") from None
                _check_pem(where, data, is_key)
                sources[attr] = where
        if (tls.client_cert is None) != (tls.client_private_key is None):
            raise ConnectionConfigError("mTLS needs both halves: a client certificate and its key (TEMPORAL_TLS_CLIENT_CERT_PATH and "
                                        "TEMPORAL_TLS_CLIENT_KEY_PATH, or tls.client_cert_path and tls.client_key_path). Fix: set both, or neither")
        kwargs["tls"] = tls.to_connect_tls_config()
    elif tls is None and merged.api_key is not None:
        kwargs["tls"] = True  # the SDK's rule: an API key means TLS with the system CAs
        sources["tls"] = "on because an API key is set"

    try:
        codec = codec_from_env(env)
    except CodecKeyError as e:
        raise ConnectionConfigError(str(e)) from None
    return Resolved(addr, ns, kwargs, profile=(profile_name or "default") if used_file else None,
                    config_file=used_file, sources=sources, codec=codec)


def explain_connect_error(e: BaseException, r: Resolved) -> str:
    """The failed connect, with the setting to fix (mirrors explainConnectError in TS)."""
    m = str(e)
    at = f"Temporal at {r.address} (address from {r.sources['address']})"
    ca = r.sources.get("server_root_ca_cert")
    if re.search(r"UnknownIssuer|BadSignature|invalid peer certificate|certificate verify failed|unable to get", m):
        if re.search(r"NotValidForName", m):
            return f"TLS: {at} presented a certificate for another host name ({m}). Fix: set TEMPORAL_TLS_SERVER_NAME (tls.server_name) to a name in it"
        return (f"TLS: {at} presented a certificate that {'the CA in ' + ca if ca else 'the system CAs'} does not trust ({m}). "
                f"Fix: set {ca.split('=')[0] if ca else 'TEMPORAL_TLS_SERVER_CA_CERT_PATH (tls.server_ca_cert_path)'} to the CA that signed the server's certificate")
    if re.search(r"CertificateRequired|BadCertificate|certificate required|handshake failure", m):
        return (f"TLS: {at} rejected the client certificate ({m}). Fix: set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH "
                "(tls.client_cert_path, tls.client_key_path) to a pair the server's client CA signed")
    if re.search(r"InvalidContentType|CorruptMessage|wrong version number", m):
        return f"TLS is on ({r.sources.get('tls')}) but {at} does not speak TLS ({m}). Fix: turn TLS off, or use the server's TLS port"
    if re.search(r"refused|tcp connect error|dns error|failed to lookup|timed out|Deadline", m, re.I):
        return (f"cannot reach {at}: {m}. Fix: start it (`ratchet up`, or `bash infra/temporal.sh start` for the local dev server), "
                "or point TEMPORAL_ADDRESS / the profile's address / --address at the right host:port")
    return f"cannot connect to {at}: {m}. Fix: check {r.sources['address']} and the TLS settings; `ratchet doctor` shows the connection in use"


async def connect_client(r: Resolved, **extra: Any) -> Client:
    """Client.connect with the resolved settings and the codec; a failure is raised as ConnectionError naming the fix."""
    data_converter: DataConverter = default_converter()
    if r.codec is not None:
        import dataclasses
        data_converter = dataclasses.replace(data_converter, payload_codec=r.codec)
    log.info("Temporal connection", extra={"temporal": r.describe()})
    try:
        return await Client.connect(**r.connect_kwargs, data_converter=data_converter, **extra)
    except RuntimeError as e:  # the bridge reports connect failures as RuntimeError
        raise ConnectionError(explain_connect_error(e, r)) from None


def exit_on_connect_error(e: BaseException, code: int = 1) -> None:
    """Print a fatal connection error and end the process at once, without interpreter teardown.

    After a failed connect (a TLS handshake refused, say) the Temporal SDK's core runtime can
    crash in teardown (SIGSEGV, seen about one exit in three), so a plain sys.exit printed the
    fix and then died of a signal instead of exiting with `code`.
    """
    print(f"error: {e}", flush=True)
    sys.stderr.flush()
    os._exit(code)
