/* common/util/rttrace.h — round-trip stamps for finding where a request's
 * time goes (issue 13), off unless TESSERA_RTTRACE names a file prefix.
 *
 * tsr_rt_stamp("s.recv") records CLOCK_MONOTONIC (shared by every process
 * on the host) and the label in a fixed in-memory table: one atomic add and
 * one clock read, no lock, no system call, so the stamps barely move what
 * they measure. The first TSR_RT_MAX stamps are kept, later ones dropped.
 * At exit (atexit, so a daemon stopped by SIGTERM/SIGINT writes it too)
 * the table goes to "<prefix>.<pid>" as lines "<ns> <label>".
 * bench/overhead_trace.py merges the files of one run into the median
 * time of each hop of a round trip.
 *
 * Labels must be string literals (only the pointer is kept). Any thread
 * may stamp. When TESSERA_RTTRACE is unset, a stamp is one load and a
 * branch. */
#ifndef TSR_UTIL_RTTRACE_H
#define TSR_UTIL_RTTRACE_H

#define TSR_RT_MAX (1u << 18)

/* Records label now, when tracing is on. */
void tsr_rt_stamp(const char *label);

#endif
