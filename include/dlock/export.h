/* dlock: symbol visibility. Every exported symbol carries DLOCK_API; the library is built with
 * -fvisibility=hidden and a version script, so nothing else leaks out of libdlock.so. */
#ifndef DLOCK_EXPORT_H_
#define DLOCK_EXPORT_H_

#if defined(DLOCK_STATIC)
#define DLOCK_API
#elif defined(_WIN32)
#if defined(DLOCK_BUILDING)
#define DLOCK_API __declspec(dllexport)
#else
#define DLOCK_API __declspec(dllimport)
#endif
#else
#define DLOCK_API __attribute__((visibility("default")))
#endif

#endif /* DLOCK_EXPORT_H_ */
