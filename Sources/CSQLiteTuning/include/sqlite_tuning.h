#ifndef INGOT_SQLITE_TUNING_H
#define INGOT_SQLITE_TUNING_H

/// Turns off SQLite's memory statistics (a global mutex taken on every allocation SQLite makes).
/// Only effective before SQLite is initialized (before the first connection opens); returns
/// SQLITE_OK, or SQLITE_MISUSE when it is too late.
int ingot_sqlite_disable_memstatus(void);

#endif
