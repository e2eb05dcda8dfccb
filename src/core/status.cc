#include "core/status.h"
// Status is header-only today; this file keeps a home for out-of-line helpers.
