"""Connection settings (temporal.toml profiles, TEMPORAL_* overrides, errors) and the
payload codec's wire format, against the vector the TypeScript side is tested with too."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from ratchet_trainer.codec import AesGcmCodec, CodecKeyError, codec_from_env
from ratchet_trainer.connection import ConnectionConfigError, resolve

REPO = Path(__file__).resolve().parents[2]
VECTOR = json.loads((REPO / "test" / "fixtures" / "codec" / "vector.json").read_text())
NO_FILE = {"HOME": "/nonexistent-home"}


def toml(tmp_path: Path, text: str, **extra: str) -> dict[str, str]:
    f = tmp_path / "temporal.toml"
    f.write_text(text)
    return {"TEMPORAL_CONFIG_FILE": str(f), **extra}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.pem")
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=client",
        "-keyout", "client.key", "-out", "client.csr")
    ssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", "-out", "client.pem")
    return {n: d / f"{n}.{ext}" for n, ext in (("ca", "pem"), ("client", "pem"), ("client_key", "key"))} | {"client_key": d / "client.key"}


def test_defaults_with_nothing_configured():
    r = resolve(env=NO_FILE)
    assert (r.address, r.namespace, r.profile, r.codec) == ("127.0.0.1:7233", "default", None, None)
    assert r.connect_kwargs == {"target_host": "127.0.0.1:7233", "namespace": "default"}
    assert r.sources == {"address": "default", "namespace": "default"}


def test_profile_env_and_flags_in_order(tmp_path):
    env = toml(tmp_path, '[profile.default]\naddress = "a:1"\n[profile.prod]\naddress = "prod:7233"\nnamespace = "prod-ns"\n',
               TEMPORAL_PROFILE="prod")
    r = resolve(env=env)
    assert (r.address, r.namespace, r.profile) == ("prod:7233", "prod-ns", "prod")
    assert r.sources["address"] == f'address in profile "prod" of {env["TEMPORAL_CONFIG_FILE"]}'
    r = resolve(env={**env, "TEMPORAL_NAMESPACE": "from-env"})
    assert (r.namespace, r.sources["namespace"]) == ("from-env", "TEMPORAL_NAMESPACE")
    r = resolve(address="flag:7233", profile="default", env={**env, "TEMPORAL_NAMESPACE": "from-env"})
    assert (r.address, r.namespace, r.sources["address"]) == ("flag:7233", "from-env", "--address")


def test_tls_profile_with_ca_and_client_pair(tmp_path, pki):
    env = toml(tmp_path, f'[profile.default]\naddress = "localhost:7234"\n[profile.default.tls]\nserver_ca_cert_path = "{pki["ca"]}"\n'
                         f'client_cert_path = "{pki["client"]}"\nclient_key_path = "{pki["client_key"]}"\n')
    r = resolve(env=env)
    tls = r.connect_kwargs["tls"]
    assert b"BEGIN CERTIFICATE" in tls.server_root_ca_cert and b"PRIVATE KEY" in tls.client_private_key
    assert r.describe()["tls"].startswith("on ([tls] in profile \"default\"")


def test_api_key_means_tls_and_is_never_described(tmp_path):
    env = toml(tmp_path, '[profile.cloud]\naddress = "ns.acct.tmprl.cloud:7233"\nnamespace = "ns.acct"\napi_key = "secret-key-123"\n',
               TEMPORAL_PROFILE="cloud")
    r = resolve(env=env)
    assert r.connect_kwargs["tls"] is True and r.connect_kwargs["api_key"] == "secret-key-123"
    assert "secret-key-123" not in json.dumps(r.describe())


@pytest.mark.parametrize("env_or_toml, message", [
    ({"TEMPORAL_PROFILE": "staging", "toml": "[profile.default]\n[profile.prod]\n"}, r'profile "staging" is not in .*\(it has: default, prod\)'),
    ({"TEMPORAL_CONFIG_FILE": "/no/such/temporal.toml"}, r"TEMPORAL_CONFIG_FILE=/no/such/temporal.toml does not exist"),
    ({"toml": '[profile.default.tls]\nserver_ca_path = "/x"\n'}, r"is not a valid temporal.toml"),
    ({"TEMPORAL_ADDRESS": "http://host:7233"}, r"TEMPORAL_ADDRESS='http://host:7233' is not a Temporal address"),
    ({"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "/no/such/ca.pem"}, r"TEMPORAL_TLS_SERVER_CA_CERT_PATH=/no/such/ca.pem cannot be read"),
    ({"RATCHET_CODEC_KEY": base64.b64encode(b"x" * 16).decode()}, r"RATCHET_CODEC_KEY decodes to 16 bytes; AES-256-GCM needs exactly 32"),
])
def test_bad_settings_name_the_setting_and_fix(tmp_path, env_or_toml, message):
    env = dict(NO_FILE)
    if "toml" in env_or_toml:
        env |= toml(tmp_path, env_or_toml["toml"])
    env |= {k: v for k, v in env_or_toml.items() if k != "toml"}
    with pytest.raises(ConnectionConfigError, match=message) as e:
        resolve(env=env)
    assert "Fix: " in str(e.value)


def test_client_cert_without_key(pki):
    with pytest.raises(ConnectionConfigError, match="mTLS needs both halves"):
        resolve(env={**NO_FILE, "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki["client"])})


def _payload(j: dict) -> Payload:
    return Payload(metadata={k: base64.b64decode(v) for k, v in j["metadata"].items()}, data=base64.b64decode(j["data"]))


def test_codec_matches_the_shared_vector_byte_for_byte():
    codec = AesGcmCodec(VECTOR["key_id"], base64.b64decode(VECTOR["key"]), nonce=lambda: base64.b64decode(VECTOR["nonce"]))
    encoded = asyncio.run(codec.encode([_payload(VECTOR["input"])]))[0]
    assert encoded == _payload(VECTOR["encoded"])
    assert asyncio.run(codec.decode([_payload(VECTOR["encoded"])]))[0] == _payload(VECTOR["input"])


def test_codec_rotation_wrong_key_and_passthrough():
    old, new = b"o" * 32, b"n" * 32
    env_old = {"RATCHET_CODEC_KEY": base64.b64encode(old).decode()}
    p = Payload(metadata={"encoding": b"json/plain"}, data=b'{"a":1}')
    enc_old = asyncio.run(codec_from_env(env_old).encode([p]))[0]
    rotated = codec_from_env({"RATCHET_CODEC_KEY": base64.b64encode(new).decode(), "RATCHET_CODEC_PREVIOUS_KEYS": env_old["RATCHET_CODEC_KEY"]})
    assert asyncio.run(rotated.decode([enc_old]))[0] == p
    only_new = codec_from_env({"RATCHET_CODEC_KEY": base64.b64encode(new).decode()})
    with pytest.raises(ValueError, match="does not hold .* Fix: add that key to RATCHET_CODEC_PREVIOUS_KEYS"):
        asyncio.run(only_new.decode([enc_old]))
    assert asyncio.run(only_new.decode([p]))[0] == p  # unencrypted payloads pass through
    tampered = Payload(); tampered.CopyFrom(enc_old); tampered.data = enc_old.data[:-1] + bytes([enc_old.data[-1] ^ 1])
    with pytest.raises(ValueError, match="fails authentication"):
        asyncio.run(codec_from_env(env_old).decode([tampered]))
    with pytest.raises(CodecKeyError, match="is not base64"):
        codec_from_env({"RATCHET_CODEC_KEY": "not base64!"})


def test_worker_refuses_bad_settings_before_starting(tmp_path):
    """`python -m ratchet_trainer.worker` with a bad codec key or a missing profile: exit with the setting and the fix."""
    import os
    import sys
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "RATCHET_CODEC"))}
    base["HOME"] = str(tmp_path)
    for extra, message in (({"RATCHET_CODEC_KEY": base64.b64encode(b"k" * 31).decode()}, "RATCHET_CODEC_KEY decodes to 31 bytes"),
                           ({"TEMPORAL_PROFILE": "prod"}, 'Temporal profile "prod" was asked for')):
        p = subprocess.run([sys.executable, "-m", "ratchet_trainer.worker", "--metrics-port", "off"], env={**base, **extra},
                           cwd=REPO / "trainer", capture_output=True, text=True, timeout=120)
        assert p.returncode == 1, p.stderr
        assert message in p.stderr and "Fix: " in p.stderr
