#include <sqlite3.h>
#include "sqlite_tuning.h"

// sqlite3_config is variadic, which Swift cannot call.
int ingot_sqlite_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
