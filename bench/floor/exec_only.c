/* The floor of starting any program here: exec and exit, no C library at all.
   Built by bench/startup.py with -nostdlib -static. */
#if defined(__x86_64__)
void _start(void) {
    __asm__ volatile("mov $60, %%eax\n\txor %%edi, %%edi\n\tsyscall" ::: "memory");
    __builtin_unreachable();
}
#elif defined(__aarch64__)
void _start(void) {
    __asm__ volatile("mov x8, #93\n\tmov x0, #0\n\tsvc #0" ::: "memory");
    __builtin_unreachable();
}
#else
#error "no exec_only probe for this architecture"
#endif
