#ifndef INGOT_CCRYPTO_SHIM_H
#define INGOT_CCRYPTO_SHIM_H
/* OpenSSL's libcrypto (Debian: libssl-dev, which libpq-dev depends on): SHA-256 only, through
   the EVP interface (SHA-NI where the CPU has it). */
#include <openssl/evp.h>
#endif
