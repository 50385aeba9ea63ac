"""Bloom filter sizing and bit positions for the Redis-backed Bloom dedup.

Sizing follows pybloom-live's partitioned Bloom filter (``BloomFilter``):
``k = ceil(log2(1/p))`` slices of ``m = ceil(n * |ln p| / (k * ln(2)^2))``
bits each; a test checks the numbers against pybloom-live itself. We cannot
instantiate pybloom-live's class to get them: it allocates the whole bit
array in the Python process, gigabytes for the filters this module sizes.

The filter is *scalable* (Almeida et al., the scheme behind pybloom-live's
``ScalableBloomFilter`` and RedisBloom): when a layer holds its capacity, a
new layer with ``SCALE`` times the capacity and ``RATIO`` times the error
rate is chained. Layer ``i`` gets error ``p * (1 - RATIO) * RATIO**i``, so
the sum over all layers, the compound false-positive rate, never exceeds
``p``. (pybloom-live starts at ``0.9 p`` and multiplies by 0.9, which lets
the compound rate grow to ``9 p``; we keep its growth factor, not that.)

Bit positions come from the request fingerprint, which is already a uniform
hash (SHA-1 in Scrapy's fingerprinter): three 48-bit numbers taken from it
drive triple hashing (Dillinger & Manolios' "enhanced double hashing"),
``x_0 = h1``, ``x_{j+1} = x_j + s_j``, ``s_{j+1} = s_j + h3`` (mod m), one
position per slice, computed in Lua with exact integer arithmetic on
doubles. No URL is hashed again. Plain double hashing (``h1 + j*h2``) leaves
only m^2 possible position sets, which visibly raises the false-positive rate
of small layers; the third term makes it m^3.

Two refinements of pybloom-live's sizing, both measured (bench/bloom_bench.py):

* ``m`` is rounded up to the next prime. With a composite ``m`` two
  fingerprints whose hash steps share a factor with ``m`` collide on many
  slices at once, and small layers exceeded their error rate (1.6 p at
  capacity 50); a prime ``m`` costs a few bits and fixes it.
* A layer's bits are split into Redis strings ("chunks") whose size is a power
  of two less the string header, at most 1/16 of the layer (and at most
  ``chunk_bits``, 2^31 bits = 256 MB by default, so filters past Redis's
  512 MB string limit work). Allocators round a string up to their next size
  class: one 1.98 MB string takes 2 MiB under jemalloc, 6 % more, and a
  string of exactly 32 KiB takes 40 KiB; chunks that fill a size class
  exactly leave only the last chunk to be rounded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from ..errors import ConfigError

__all__ = [
    "CHUNK_BITS",
    "LAYOUT",
    "MAX_CHUNKS",
    "RATIO",
    "SCALE",
    "SDS_OVERHEAD",
    "BloomSpec",
    "Layer",
    "chunk_bits_for",
    "hash_args",
    "is_prime",
    "next_prime",
    "positions",
    "slices_and_bits",
]

#: Capacity growth from one layer to the next (pybloom-live's SMALL_SET_GROWTH).
SCALE = 2
#: Error-rate tightening from one layer to the next.
RATIO = 0.5
#: Most bits per Redis string (256 MB, half of Redis's 512 MB limit).
CHUNK_BITS = 1 << 31
#: Most Redis strings per layer (each is a key the admission script is given).
MAX_CHUNKS = 16
#: Version of the layout (sizing, hashing, chunking): nodes must agree on it.
LAYOUT = "v2"


def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def next_prime(n: int) -> int:
    while not is_prime(n):
        n += 1
    return n


def slices_and_bits(capacity: int, error_rate: float) -> tuple[int, int]:
    """pybloom-live's sizing: (number of slices k, bits per slice m)."""
    k = math.ceil(math.log2(1.0 / error_rate))
    m = math.ceil((capacity * abs(math.log(error_rate))) / (k * (math.log(2) ** 2)))
    return k, m


#: Bytes an allocator block holds besides a Redis string's payload (SDS header, NUL).
SDS_OVERHEAD = 16


def chunk_bits_for(bits: int, most: int = CHUNK_BITS) -> int:
    """Bits per chunk of a layer of ``bits``.

    A chunk's payload is a power of two minus the string header, so that the
    whole block is exactly an allocator size class (jemalloc and libc alike),
    and a chunk is at most 1/MAX_CHUNKS of the layer and at most ``most`` bits.
    """
    nbytes = -(-bits // 8)
    size = 1 << max(5, math.ceil(math.log2(-(-nbytes // MAX_CHUNKS) + SDS_OVERHEAD)))
    return max(8, min((size - SDS_OVERHEAD) * 8, most - most % 8))


@dataclass(frozen=True)
class Layer:
    """One Bloom filter of the chain."""

    index: int
    capacity: int
    error_rate: float
    slices: int
    bits_per_slice: int
    chunk_bits: int = field(default=CHUNK_BITS)

    @property
    def bits(self) -> int:
        return self.slices * self.bits_per_slice

    @property
    def chunks(self) -> int:
        return -(-self.bits // self.chunk_bits)

    def chunk_bytes(self, chunk: int) -> int:
        """Size in bytes of chunk number ``chunk`` (the last one may be shorter)."""
        bits = min(self.chunk_bits, self.bits - chunk * self.chunk_bits)
        return -(-bits // 8)

    def descriptor(self) -> str:
        """What the admission script needs to know: "m,k,capacity,chunks,chunk bits"."""
        return f"{self.bits_per_slice},{self.slices},{self.capacity},{self.chunks},{self.chunk_bits}"

    def fill_to_fp(self, fill: float) -> float:
        """False-positive probability of this layer when ``fill`` of its bits are set."""
        return fill**self.slices


@dataclass(frozen=True)
class BloomSpec:
    """Configuration of a crawl's scalable Bloom filter."""

    capacity: int
    error_rate: float
    chunk_bits: int = CHUNK_BITS

    def __post_init__(self) -> None:
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity <= 0:
            raise ConfigError(f"CRAWLPLUG_BLOOM_CAPACITY must be a positive integer, got {self.capacity!r}")
        if not (isinstance(self.error_rate, (int, float)) and 0 < self.error_rate < 1):
            raise ConfigError(f"CRAWLPLUG_BLOOM_ERROR_RATE must be in (0, 1), got {self.error_rate!r}")
        if self.chunk_bits < 8 or self.chunk_bits % 8 or self.chunk_bits > 1 << 32:
            raise ConfigError(f"chunk size must be a multiple of 8 bits up to 2^32, got {self.chunk_bits}")

    @cached_property
    def _layers(self) -> dict[int, Layer]:
        return {}

    def layer(self, index: int) -> Layer:
        """Layer ``index`` of the chain (deterministic: every node computes the same)."""
        cached = self._layers.get(index)
        if cached is None:
            capacity = self.capacity * SCALE**index
            error = self.error_rate * (1 - RATIO) * RATIO**index
            k, m = slices_and_bits(capacity, error)
            m = next_prime(m)
            chunk_bits = chunk_bits_for(k * m, self.chunk_bits)
            cached = self._layers[index] = Layer(index, capacity, error, k, m, chunk_bits)
        return cached

    def layers(self, count: int) -> list[Layer]:
        return [self.layer(i) for i in range(count)]

    def identity(self) -> str:
        """Stored with the filter: nodes with another sizing must not share it."""
        return f"{self.capacity}:{self.error_rate!r}:{self.chunk_bits}:{SCALE}:{RATIO!r}:{LAYOUT}"


def _h(fingerprint: bytes) -> tuple[int, int, int]:
    if len(fingerprint) < 18:
        raise ValueError("a fingerprint of at least 18 bytes is needed")
    return (
        int.from_bytes(fingerprint[0:6], "big"),
        int.from_bytes(fingerprint[6:12], "big"),
        int.from_bytes(fingerprint[12:18], "big"),
    )


def hash_args(fingerprint: bytes) -> bytes:
    """The three 48-bit numbers of triple hashing, as the script's "h1,h2,h3" argument."""
    return "{},{},{}".format(*_h(fingerprint)).encode()


def positions(layer: Layer, fingerprint: bytes) -> list[int]:
    """Absolute bit positions of ``fingerprint`` in ``layer`` (the Lua code does the same)."""
    h1, h2, h3 = _h(fingerprint)
    m = layer.bits_per_slice
    x, step, bump = h1 % m, h2 % m, h3 % m
    out = []
    for j in range(layer.slices):
        out.append(j * m + x)
        x = (x + step) % m
        step = (step + bump) % m
    return out
