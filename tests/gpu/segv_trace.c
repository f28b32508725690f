/* LD_PRELOAD helper for the GPU run (tests/gpu/run.sh): on SIGSEGV/SIGBUS/SIGABRT print every frame as
 * library + offset (for addr2line on the library brought back), then die with the same signal. The GPU
 * machine has no gdb, and cuda-gdb does not run under its gVisor sandbox.
 *   gcc -shared -fPIC -O1 -o segv_trace.so tests/gpu/segv_trace.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_fault(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  void* frames[64];
  int n = backtrace(frames, 64);
  char line[1024];
  int len = snprintf(line, sizeof line, "segv_trace: signal %d (%s) at address %p; %d frames:\n", sig,
                     strsignal(sig), info ? info->si_addr : NULL, n);
  if (write(2, line, (size_t)len) < 0) _exit(128 + sig);
  for (int i = 0; i < n; ++i) {
    Dl_info d;
    memset(&d, 0, sizeof d);
    if (dladdr(frames[i], &d) && d.dli_fname) {
      len = snprintf(line, sizeof line, "  #%d %s +0x%lx (%s)\n", i, d.dli_fname,
                     (unsigned long)((char*)frames[i] - (char*)d.dli_fbase), d.dli_sname ? d.dli_sname : "?");
    } else {
      len = snprintf(line, sizeof line, "  #%d %p\n", i, frames[i]);
    }
    if (write(2, line, (size_t)len) < 0) break;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
}
