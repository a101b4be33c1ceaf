// CRC-32C of the archive's entries (docs/archive-format.md). One chain of the instruction, 8 bytes
// a step: 2.4–2.6 GB/s on the Intel Xeon of docs/benchmarks.md against 0.65–0.72 GB/s for the
// table (64 MiB, three runs; docs/performance-notes.md, "Checksums and batch sorts").
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
}

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;  // little-endian on every target Ingot builds for
}

uint32_t ingot_crc32c_software(uint32_t crc, const void *bytes, size_t count) {
    pthread_once(&table_once, make_table);
    const unsigned char *p = bytes;
    uint32_t c = ~crc;
    while (count >= 8) {
        uint64_t v = load64(p) ^ c;
        c = table[7][v & 0xFF] ^ table[6][(v >> 8) & 0xFF] ^ table[5][(v >> 16) & 0xFF] ^ table[4][(v >> 24) & 0xFF]
            ^ table[3][(v >> 32) & 0xFF] ^ table[2][(v >> 40) & 0xFF] ^ table[1][(v >> 48) & 0xFF]
            ^ table[0][v >> 56];
        p += 8;
        count -= 8;
    }
    while (count--) c = table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t hardware(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    uint64_t c = ~crc;
    while (count >= 8) {
        c = _mm_crc32_u64(c, load64(p));
        p += 8;
        count -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (count--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

static int detect(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_SSE4_2) != 0;
}
#elif defined(__aarch64__)
__attribute__((target("+crc"))) static uint32_t hardware(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    uint32_t c = ~crc;
    while (count >= 8) {
        c = __crc32cd(c, load64(p));
        p += 8;
        count -= 8;
    }
    while (count--) c = __crc32cb(c, *p++);
    return ~c;
}

static int detect(void) { return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0; }
#else
static uint32_t hardware(uint32_t crc, const void *bytes, size_t count) {
    return ingot_crc32c_software(crc, bytes, count);
}

static int detect(void) { return 0; }
#endif

// -1 unknown, then 0 or 1; racing first calls store the same answer.
static int has_hardware = -1;

int ingot_crc32c_is_hardware(void) {
    int known = __atomic_load_n(&has_hardware, __ATOMIC_RELAXED);
    if (known < 0) {
        known = detect();
        __atomic_store_n(&has_hardware, known, __ATOMIC_RELAXED);
    }
    return known;
}

uint32_t ingot_crc32c(uint32_t crc, const void *bytes, size_t count) {
    return ingot_crc32c_is_hardware() ? hardware(crc, bytes, count) : ingot_crc32c_software(crc, bytes, count);
}
