#ifndef INGOT_CLIBPQ_SHIM_H
#define INGOT_CLIBPQ_SHIM_H
/* libpq, PostgreSQL's C client (Debian: libpq-dev; headers under /usr/include/postgresql). */
#include <libpq-fe.h>
#endif
