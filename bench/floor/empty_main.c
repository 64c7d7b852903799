/* An empty program linked statically with glibc, as pyjail is: its start-up minus
   exec_only's is the C library's own start (on x86, CPU-feature and cache-size probing). */
int main(void) { return 0; }
