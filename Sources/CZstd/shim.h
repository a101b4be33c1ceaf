#ifndef INGOT_CZSTD_SHIM_H
#define INGOT_CZSTD_SHIM_H
#include <zstd.h>
#endif
