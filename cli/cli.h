/* cli.h -- the subcommands of the autopar front end. Each takes the
 * arguments after its name and returns the process exit code: 0 success,
 * 1 internal failure, 2 bad input or usage. */
#ifndef AP_CLI_H
#define AP_CLI_H

int ap_cmd_graph(int argc, char **argv);

#endif
