#ifndef INGOT_CZLIB_SHIM_H
#define INGOT_CZLIB_SHIM_H
#include <zlib.h>
#endif
