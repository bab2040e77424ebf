"""Optional payload encryption, the same wire format as the TypeScript side
(src/connection/codec.ts), so a payload either side encrypts the other decrypts:

  metadata  encoding = "binary/encrypted", encryption-key-id = <id>, encryption-cipher = "AES-256-GCM"
  data      nonce (12 bytes) || ciphertext || GCM tag (16 bytes)
  plaintext the original Payload, protobuf-encoded

Keys come from the environment: RATCHET_CODEC_KEY (base64 of 32 bytes), optional
RATCHET_CODEC_KEY_ID (default "k" + 12 hex of its sha256), optional
RATCHET_CODEC_PREVIOUS_KEYS (comma-separated [id=]base64, decrypt only).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from typing import Callable, Mapping, Sequence

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING_ENCRYPTED = b"binary/encrypted"
CIPHER = b"AES-256-GCM"
META_KEY_ID = "encryption-key-id"
META_CIPHER = "encryption-cipher"
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32


class CodecKeyError(ValueError):
    """A codec key setting that cannot work; the message names the variable and the fix."""


def default_key_id(key: bytes) -> str:
    return "k" + hashlib.sha256(key).hexdigest()[:12]


def parse_key(b64: str, setting: str) -> bytes:
    trimmed = b64.strip()
    if not re.fullmatch(r"[A-Za-z0-9+/_-]+={0,2}", trimmed):
        raise CodecKeyError(f"{setting} is not base64. Fix: generate a key with `openssl rand -base64 32`")
    try:
        key = base64.b64decode(trimmed + "=" * (-len(trimmed) % 4), altchars=b"-_" if ("-" in trimmed or "_" in trimmed) else None)
    except binascii.Error as e:
        raise CodecKeyError(f"{setting} is not base64 ({e}). Fix: generate a key with `openssl rand -base64 32`") from None
    if len(key) != KEY_BYTES:
        raise CodecKeyError(f"{setting} decodes to {len(key)} bytes; AES-256-GCM needs exactly {KEY_BYTES}. "
                            "Fix: generate a key with `openssl rand -base64 32`")
    return key


class AesGcmCodec(PayloadCodec):
    def __init__(self, key_id: str, key: bytes, previous: Sequence[tuple[str, bytes]] = (),
                 nonce: Callable[[], bytes] = lambda: os.urandom(NONCE_BYTES)):
        self.key_id = key_id
        self._current = AESGCM(key)
        self._by_id = {kid: AESGCM(k) for kid, k in previous}
        self._by_id[key_id] = self._current
        self._nonce = nonce  # injectable for the cross-language test vectors only

    def encode_one(self, p: Payload) -> Payload:
        nonce = self._nonce()
        body = self._current.encrypt(nonce, p.SerializeToString(), None)  # ciphertext || tag
        return Payload(metadata={"encoding": ENCODING_ENCRYPTED, META_KEY_ID: self.key_id.encode(), META_CIPHER: CIPHER},
                       data=nonce + body)

    def decode_one(self, p: Payload) -> Payload:
        if p.metadata.get("encoding") != ENCODING_ENCRYPTED:
            return p
        kid = p.metadata.get(META_KEY_ID, b"").decode()
        aes = self._by_id.get(kid)
        if aes is None:
            raise ValueError(f'payload encrypted with key id "{kid}", which this process does not hold (it has: {", ".join(self._by_id)}). '
                             "Fix: add that key to RATCHET_CODEC_PREVIOUS_KEYS (or make it RATCHET_CODEC_KEY)")
        if len(p.data) < NONCE_BYTES + TAG_BYTES:
            raise ValueError(f"encrypted payload is {len(p.data)} bytes, too short for AES-256-GCM")
        try:
            plain = aes.decrypt(p.data[:NONCE_BYTES], p.data[NONCE_BYTES:], None)
        except Exception:  # cryptography's InvalidTag: wrong key under that id, or altered bytes
            raise ValueError(f'payload with key id "{kid}" fails authentication: the key under that id is not the one '
                             "that encrypted it, or the payload was altered") from None
        out = Payload()
        out.ParseFromString(plain)
        return out

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encode_one(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decode_one(p) for p in payloads]


def _parse_key_list(value: str) -> list[tuple[str, bytes]]:
    out = []
    for i, entry in enumerate(e.strip() for e in value.split(",")):
        if not entry:
            continue
        eq = entry.find("=")
        has_id = eq > 0 and not re.fullmatch(r"=*", entry[eq:])
        kid, b64 = (entry[:eq], entry[eq + 1:]) if has_id else (None, entry)
        key = parse_key(b64, f"RATCHET_CODEC_PREVIOUS_KEYS entry {i + 1}")
        out.append((kid or default_key_id(key), key))
    return out


def codec_from_env(env: Mapping[str, str] | None = None) -> AesGcmCodec | None:
    """The codec the environment asks for, or None when RATCHET_CODEC_KEY is unset."""
    env = os.environ if env is None else env
    b64 = env.get("RATCHET_CODEC_KEY", "")
    if not b64:
        if env.get("RATCHET_CODEC_PREVIOUS_KEYS"):
            raise CodecKeyError("RATCHET_CODEC_PREVIOUS_KEYS is set but RATCHET_CODEC_KEY is not. Fix: set RATCHET_CODEC_KEY to the current key")
        return None
    key = parse_key(b64, "RATCHET_CODEC_KEY")
    kid = (env.get("RATCHET_CODEC_KEY_ID") or "").strip() or default_key_id(key)
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", kid):
        raise CodecKeyError(f"RATCHET_CODEC_KEY_ID={kid!r} is not a key id. Fix: 1-64 letters, digits, '.', '_' or '-'")
    return AesGcmCodec(kid, key, _parse_key_list(env.get("RATCHET_CODEC_PREVIOUS_KEYS", "")))


def _main() -> None:
    """`python -m ratchet_trainer.codec encode|decode` < {"payloads": [...]}: the codec server's JSON
    format on stdin and stdout, with the key from the environment (used by the cross-language test)."""
    import asyncio
    import json
    import sys

    op = sys.argv[1] if len(sys.argv) > 1 else ""
    if op not in ("encode", "decode"):
        raise SystemExit("usage: python -m ratchet_trainer.codec encode|decode < payloads.json")
    try:
        codec = codec_from_env()
    except CodecKeyError as e:
        raise SystemExit(f"error: {e}") from None
    if codec is None:
        raise SystemExit("error: RATCHET_CODEC_KEY is not set. Fix: export the key the workers use")
    body = json.load(sys.stdin)
    payloads = [Payload(metadata={k: base64.b64decode(v) for k, v in p.get("metadata", {}).items()},
                        data=base64.b64decode(p.get("data", ""))) for p in body["payloads"]]
    out = asyncio.run(codec.encode(payloads) if op == "encode" else codec.decode(payloads))
    json.dump({"payloads": [{"metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
                             "data": base64.b64encode(p.data).decode()} for p in out]}, sys.stdout)


if __name__ == "__main__":
    _main()
