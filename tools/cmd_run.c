#include "cli.h"
int cmd_run(int argc, char **argv) { (void)argc; (void)argv; return 1; }
