"""The teacher token at rest: only a salted scrypt hash is stored (``scrypt$n$r$p$salt$hash``,
hex), never the token. scrypt rather than one sha256: ``--teacher-token`` lets a teacher pick
a token a person could guess, and a stolen database should not make guessing it cheap (a
generated token has 256 random bits, for which either would do). One check costs about 16 MiB
and tens of milliseconds; the server checks a token once and then remembers its sha256.

>>> stored = hash_token("s3cret")
>>> token_matches("s3cret", stored), token_matches("s3cret!", stored), "s3cret" in stored
(True, False, False)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

N, R, P = 2 ** 14, 8, 1


def new_token() -> str:
    """A new teacher token: 32 random bytes (256 bits), URL-safe."""
    return secrets.token_urlsafe(32)


def hash_token(token: str, salt: bytes | None = None) -> str:
    """``token``'s salted scrypt hash as stored (a new 16-byte salt unless ``salt``)."""
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = hashlib.scrypt(token.encode(), salt=salt, n=N, r=R, p=P, dklen=32)
    return f"scrypt${N}${R}${P}${salt.hex()}${digest.hex()}"


def is_hash(value: str) -> bool:
    """Whether a stored value is a hash of ours (a database from before holds the token)."""
    parts = value.split("$")
    return len(parts) == 6 and parts[0] == "scrypt"


def token_matches(token: str, stored: str) -> bool:
    """Whether ``token`` hashes to ``stored`` (constant-time compare); False for a malformed
    ``stored``."""
    try:
        _, n, r, p, salt, digest = stored.split("$")
        got = hashlib.scrypt(token.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r),
                             p=int(p), dklen=len(digest) // 2)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got.hex(), digest)
