#ifndef INGOT_CRC32C_H
#define INGOT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/// The CRC-32C (Castagnoli) of `count` bytes at `bytes`, continuing from `crc` (0 to start):
/// the processor's CRC32 instruction where it has one (SSE 4.2 on x86-64, the CRC extension on
/// AArch64), checked once at the first call; a table-driven loop otherwise. Both give the same
/// value, which `ingot_crc32c_software` computes alone (for tests).
uint32_t ingot_crc32c(uint32_t crc, const void *bytes, size_t count);

/// The table-driven loop alone (slicing by 8), whatever the processor.
uint32_t ingot_crc32c_software(uint32_t crc, const void *bytes, size_t count);

/// 1 when `ingot_crc32c` uses the processor's instruction, 0 when it uses the table.
int ingot_crc32c_is_hardware(void);

#endif
