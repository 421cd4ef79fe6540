/* test_megatron_flags.c -- --megatron-args reads past the flags that do
 * not change the step (data, logging, optimizer settings), and notes the
 * ones no Megatron-LM has, with the nearest flag that does: a typo of a
 * layout flag would otherwise price the layout without it. A word that is
 * no flag, no flag's value and no part of the launch is refused. */
#include "model.h"
#include "planner/megatron_flags.h"

static void megatron_lm_flags_of_every_era_are_known(void)
{
    const char *flags[] = {"--tensor-model-parallel-size", "--lr", "--data-path",
                           "--use-mcore-models", "--no-rl-partial-rollouts",
                           "--model-parallel-size", "--checkpoint-activations", "--DDP-impl",
                           "--activations-checkpoint-method", "--use-custom-fsdp"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        CHECK(ap_megatron_flag_known(flags[i]));
    CHECK(!ap_megatron_flag_known("--tensor-model-paralel-size"));
    CHECK(!ap_megatron_flag_known("tensor-model-parallel-size"));
    CHECK(!ap_megatron_flag_known(""));
}

/* A switch takes no value in any Megatron-LM the table covers, whatever
 * its name says: --no-load-optim is store_true, --no-rl-partial-rollouts
 * the --no- form argparse makes of a BooleanOptionalAction. Options that
 * look like switches but take a value are none: --onnx-safe and
 * --lazy-mpu-init are type=bool ("--onnx-safe True"), --no-rope-freq takes
 * a layer pattern, --data-path and --rampup-batch-size any number of
 * words, --spec two words in 2023 and any number in 2025. A flag of other
 * versions only (--cpu-offloading) is not known to be one. */
static void switches_are_the_options_that_take_no_value(void)
{
    const char *switches[] = {"--use-mcore-models", "--bf16", "--no-load-optim",
                              "--disable-bias-linear", "--rl-partial-rollouts",
                              "--no-rl-partial-rollouts", "--override-opt_param-scheduler",
                              "--use-checkpoint-opt-param-scheduler", "--fp8-e4m3",
                              "--no-query-key-layer-scaling", "--standalone-embedding-stage"};
    const char *values[] = {"--lr", "--data-path", "--rampup-batch-size", "--onnx-safe",
                            "--lazy-mpu-init", "--no-rope-freq", "--spec", "--recompute-modules",
                            "--dist-ckpt-format", "--cpu-offloading", "--no-such-switch", ""};
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++) {
        CHECK(ap_megatron_flag_switch(switches[i]));
        CHECK(ap_megatron_flag_known(switches[i]));
    }
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
        CHECK(!ap_megatron_flag_switch(values[i]));
}

static void the_nearest_flag_is_within_two_edits(void)
{
    CHECK_STR_HAS(ap_megatron_flag_nearest("--tensor-model-paralel-size"),
                  "--tensor-model-parallel-size");
    CHECK_STR_HAS(ap_megatron_flag_nearest("--sequence-paralel"), "--sequence-parallel");
    CHECK_STR_HAS(ap_megatron_flag_nearest("--micro-batch-sizes"), "--micro-batch-size");
    CHECK(ap_megatron_flag_nearest("--no-such-flag-at-all") == NULL);
    CHECK(ap_megatron_flag_nearest("--tensor-parallel") == NULL);
}

static void a_typo_is_noted_and_a_real_line_is_not(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--tensor-model-paralel-size 8 --lr 1e-4 --foo 3", &m,
                                      err), err);
    CHECK(m.tp == 1);
    CHECK(!strcmp(m.unknown,
                  "--tensor-model-paralel-size (--tensor-model-parallel-size?), --foo"));
    /* Values, negative numbers and paths included, are not flags. */
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args(
                   "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 "
                   "--sequence-parallel --micro-batch-size 1 --global-batch-size 64 "
                   "--data-path 0.5 /data/a_text_document 0.5 /data/b_text_document "
                   "--split 949,50,1 --lr 6.0e-5 --min-lr -1 --adam-beta2 0.95 "
                   "--use-distributed-optimizer --overlap-grad-reduce --bf16 "
                   "--tokenizer-type HuggingFaceTokenizer --log-interval 10 "
                   "--tensorboard-dir /tb --save /ckpt --save-interval 1000",
                   &m, err),
               err);
    CHECK(m.unknown[0] == '\0');
}

/* argparse reads --flag=value as --flag value, and so does autopar: only
 * the first '=' of a flag splits it. */
static void a_flag_and_its_value_may_be_joined_by_equals(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--tensor-model-parallel-size=4 --micro-batch-size=2 "
                                      "--recompute-granularity=full --recompute-method=uniform --data-path=a=b "
                                      "--sequence-parallel", &m, err), err);
    CHECK(m.tp == 4 && m.mbs == 2 && m.sp == 1);
    CHECK(m.recompute == AP_RECOMPUTE_FULL);
    CHECK(m.unknown[0] == '\0');
}

/* A script pasted with its comments: a word starting with '#' comments out
 * the rest of its line, as the shell reads it, and the flags it held are
 * noted; a '#' inside a word is not a comment. */
static void shell_comments_are_not_read(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--tensor-model-parallel-size 2\n"
                                      "  # --pipeline-model-parallel-size 4 # not set\n"
                                      "  --attention-backend auto # flash/fused\n"
                                      "  --data-path a#b --micro-batch-size 2", &m, err), err);
    CHECK(m.tp == 2 && m.pp == 1 && m.mbs == 2);
    CHECK(!strcmp(m.commented, "--pipeline-model-parallel-size"));
    /* Flattened onto one line, a comment takes what follows it. */
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--tensor-model-parallel-size 2 # tp --sequence-parallel "
                                      "--micro-batch-size 2", &m, err), err);
    CHECK(m.tp == 2 && m.sp == 0 && m.mbs == 1);
    CHECK(!strcmp(m.commented, "--sequence-parallel, --micro-batch-size"));
}

/* A script's array of quoted flag-and-value strings, expanded unquoted, is
 * split by the shell: Megatron-LM's Llama examples write their data flags so. */
static void quoted_flags_with_values_are_split(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("\"--mock-data\" \"--tokenizer-type NullTokenizer\" "
                                      "\"--vocab-size 128256\" \"--split '99,1,0'\" "
                                      "--pipeline-model-parallel-size '2'", &m, err), err);
    CHECK(!strcmp(m.shape.tokenizer, "NullTokenizer") && m.shape.vocab == 128256);
    CHECK(m.pp == 2 && m.unknown[0] == '\0');
}

/* Megatron-MoE-ModelZoo's MODEL_ARGS are YAML keys: "--flag: value", true
 * for a switch given, false for one left out. */
static void yaml_keys_read_as_flags(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("  --tensor-model-parallel-size: 4\n"
                                      "  --sequence-parallel: true\n"
                                      "  --use-distributed-optimizer: false\n"
                                      "  --moe-layer-freq: ([0]*3+[1]*58)\n"
                                      "  # --micro-batch-size: 2\n"
                                      "  --bf16: true\n", &m, err), err);
    CHECK(m.tp == 4 && m.sp == 1 && m.zero == AP_ZERO_NONE && m.mbs == 1);
    CHECK(!strcmp(m.shape.moe_freq, "([0]*3+[1]*58)") && m.shape.half);
    CHECK(!strcmp(m.commented, "--micro-batch-size") && m.unknown[0] == '\0');
}

/* YAML reads True and TRUE as true too. */
static void yaml_booleans_in_any_case(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--sequence-parallel: True\n"
                                      "--use-distributed-optimizer: FALSE\n"
                                      "--overlap-grad-reduce: TRUE\n", &m, err), err);
    CHECK(m.sp == 1 && m.zero == AP_ZERO_NONE && m.overlap_grad == 1);
}

/* `line` is refused as input, its message holding `says`. */
static void expect_refused(const char *line, const char *says)
{
    ap_megatron m;
    char err[AP_ERR_LEN] = "";
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args(line, &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, says);
}

/* `line` is read into *m (from Megatron-LM's defaults); 1 when it was,
 * else 0 with the failure counted and its message printed. */
static int expect_read(const char *line, ap_megatron *m)
{
    char err[AP_ERR_LEN] = "";
    ap_megatron_default(m);
    int rc = ap_megatron_parse_args(line, m, err);
    CHECK(rc == AP_OK);
    if (rc)
        fprintf(stderr, "  reading \"%s\": %s\n", line, err);
    return rc == AP_OK;
}

/* A word that is not a flag, not the value of one, and not part of the
 * launch around the flags would be read past, and the line priced without
 * what it meant: each is refused, naming the word and what to write. */
static void words_that_are_no_flag_are_refused(void)
{
    static const struct {
        const char *line, *says;
    } cases[] = {
        {"tp=4", "tp=4: looks like a --megatron spec; use --megatron \"tp=4\", or "
                 "Megatron-LM's flag here: --tensor-model-parallel-size 4"},
        {"--bf16 tp=4,pp=2", "tp=4,pp=2: looks like a --megatron spec; use --megatron "
                             "\"tp=4,pp=2\""},
        {"--tensor-model-parallel-size 4 \xe2\x80\x93-pipeline-model-parallel-size 2",
         "starts with an en dash (U+2013), not ASCII \"--\"; write "
         "--pipeline-model-parallel-size"},
        {"\xe2\x80\x94sequence-parallel", "starts with an em dash (U+2014)"},
        {"--lr \xe2\x88\x92" "1e-4", "starts with a minus sign (U+2212), not ASCII \"-\"; "
                                     "write -1e-4"},
        {"tensor-model-parallel-size 4", "tensor-model-parallel-size: Megatron-LM's flag "
                                         "without its dashes; write "
                                         "--tensor-model-parallel-size"},
        {"--sequence-parallel true", "--sequence-parallel true: --sequence-parallel is a "
                                     "switch and takes no value; Megatron-LM's argparse "
                                     "rejects 'true'"},
        {"--use-distributed-optimizer=1", "--use-distributed-optimizer is a switch"},
        {"--tensor-model-parallel-size 4 8", "8: not a flag, and "
                                             "--tensor-model-parallel-size before it takes "
                                             "one value"},
        {"--num-layers 32 ... --bf16", "...: not a flag, and --num-layers before it takes "
                                       "one value"},
        {"... --bf16", "...: not a Megatron-LM flag, nor a flag's value, nor a word of the "
                       "launch"},
        {"if [ -n $X ]; then --bf16", "if: not a Megatron-LM flag"},
        {"", "--megatron-args: empty"},
        {"  \n", "--megatron-args: empty"},
        {"TP=4 PP=2", "\"TP=4 PP=2\": no flag"},
        {"torchrun pretrain_gpt.py", "no flag"},
        {"# --tensor-model-parallel-size 4",
         "every flag is in a shell comment ('#' to the end of its line): "
         "--tensor-model-parallel-size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refused(cases[i].line, cases[i].says);
}

/* What a launch line and a script carry around the flags is read past: the
 * environment, the launcher and its options, the script, a one-line array,
 * a line continuation (its newline kept or not), a pipe to tee, and the
 * values of flags read past, however many. */
static void the_launch_around_the_flags_is_read_past(void)
{
    static const char *const lines[] = {
        "CUDA_DEVICE_MAX_CONNECTIONS=1 python3 -u -m torch.distributed.run "
        "--nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 4 "
        "--sequence-parallel 2>&1 | tee train.log",
        "export NCCL_DEBUG=WARN\nARGS=(--tensor-model-parallel-size 4 --sequence-parallel)\n"
        "cd /workspace/megatron && torchrun --nproc-per-node 8 pretrain_gpt.py ${ARGS[@]}",
        "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n  --tensor-model-parallel-size 4 \\ "
        "--sequence-parallel \\",
        "--data-path 0.5 /a 0.5 /b --rampup-batch-size 16 16 5859375 --min-lr -1 "
        "--tensor-model-parallel-size 4 --sequence-parallel --nproc-per-node 8",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        ap_megatron m;
        char err[AP_ERR_LEN];
        ap_megatron_default(&m);
        REQUIRE_OK(ap_megatron_parse_args(lines[i], &m, err), err);
        CHECK(m.tp == 4 && m.sp == 1 && m.launcher.nproc == 8);
        CHECK(m.unknown[0] == '\0');
    }
}

/* A switch autopar reads past still takes no value: the word after it is
 * refused as argparse refuses it, where a flag that takes values keeps
 * its words. Between a launcher and the script the flags are the
 * launcher's, whose values stay theirs (srun's --profile). */
static void a_word_after_a_switch_read_past_is_refused(void)
{
    static const struct {
        const char *line, *says;
    } refused[] = {
        {"--use-mcore-models true --bf16",
         "--use-mcore-models true: --use-mcore-models is a switch and takes no value; "
         "Megatron-LM's argparse rejects 'true' (unrecognized arguments)"},
        {"--no-load-optim 1", "--no-load-optim is a switch"},
        {"--no-rl-partial-rollouts False", "--no-rl-partial-rollouts is a switch"},
        {"--eod-mask-loss=1", "--eod-mask-loss 1: --eod-mask-loss is a switch"},
        {"torchrun --nproc-per-node 8 pretrain_gpt.py --mock-data /data/x",
         "--mock-data is a switch"},
        {"srun --profile All python pretrain_gpt.py --log-throughput yes",
         "--log-throughput is a switch"},
        /* After a switch a variable can only hold flags, which autopar
         * does not see. */
        {"--use-mcore-models $EXTRA_ARGS --tensor-model-parallel-size 4",
         "$EXTRA_ARGS: a shell variable where flags go"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        expect_refused(refused[i].line, refused[i].says);
    static const char *const read[] = {
        "--onnx-safe True --lazy-mpu-init True --rampup-batch-size 16 16 5859375 "
        "--data-path 0.3 /a 0.7 /b --eod-mask-loss --log-throughput --tensor-model-parallel-size 4",
        "--rl-partial-rollouts --no-rl-partial-rollouts --use-mcore-models "
        "--tensor-model-parallel-size 4 --use-mcore-models 2>&1 | tee train.log",
        "srun --profile All --mpi pmix python pretrain_gpt.py --tensor-model-parallel-size 4",
        "--use-mcore-models \\\n  --tensor-model-parallel-size 4 --log-throughput \\",
        "--data-path $DATA --tokenizer-model $TOK --tensor-model-parallel-size 4",
    };
    for (size_t i = 0; i < sizeof read / sizeof read[0]; i++) {
        ap_megatron m;
        if (expect_read(read[i], &m))
            CHECK(m.tp == 4);
    }
}

/* NAME=--flag, unquoted, keeps the flag from Megatron-LM: before the
 * script the shell makes it a variable's value, after the script on the
 * same command argparse gets the word whole and refuses it. A new line
 * not continued starts a new command. Variables of other tools whose
 * values are flags (XLA_FLAGS) are the environment's, read past. */
static void a_flag_assigned_to_a_variable_is_refused(void)
{
    static const struct {
        const char *line, *says;
    } cases[] = {
        {"EXTRA=--sequence-parallel torchrun pretrain_gpt.py --tensor-model-parallel-size 4",
         "EXTRA=--sequence-parallel: a shell assignment; --sequence-parallel is the "
         "variable's value, not an argument, so it would not reach Megatron-LM as written"},
        {"torchrun pretrain_gpt.py --tensor-model-parallel-size 4 SP=--sequence-parallel",
         "SP=--sequence-parallel: after the training script this is one argument, not an "
         "assignment, and Megatron-LM's argparse rejects it (unrecognized arguments); write "
         "--sequence-parallel"},
        {"torchrun pretrain_gpt.py \\\n  --bf16 \\\n  PP=--pipeline-model-parallel-size=2",
         "after the training script"},
        {"torchrun pretrain_gpt.py --bf16\nPP=--pipeline-model-parallel-size=2",
         "PP=--pipeline-model-parallel-size=2: a shell assignment"},
        {"python pretrain_gpt.py --bf16 && ARGS+=--use-distributed-optimizer",
         "a shell assignment; --use-distributed-optimizer is the variable's value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refused(cases[i].line, cases[i].says);
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("XLA_FLAGS=--xla_dump_to=/tmp EXTRA=\"--sequence-parallel\" "
                                      "torchrun pretrain_gpt.py --tensor-model-parallel-size 4",
                                      &m, err), err);
    CHECK(m.tp == 4 && m.sp == 1);
}

/* `bash -x` prints each command a script runs after "+ " ("++ " for one
 * it runs inside another): a line pasted from the trace reads as the
 * command itself. The prefix counts only at the start of a command, as the
 * trace prints it; after a flag, or on a line a backslash continues, it is
 * a word argparse would refuse. So for the builtin set (set -e at the top
 * of a script, set -f in autopar's own exports), whose options are its
 * own. */
static void a_bash_x_trace_reads_as_the_command_it_ran(void)
{
    static const char *const lines[] = {
        "+ torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 4 "
        "--sequence-parallel",
        "+ export CUDA_DEVICE_MAX_CONNECTIONS=1\n+ GPUS_PER_NODE=8\n"
        "+ torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 4 "
        "--sequence-parallel",
        "+++ torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 4 "
        "--sequence-parallel",
        "set -euo pipefail\nset -f\ntorchrun --nproc_per_node 8 pretrain_gpt.py "
        "--tensor-model-parallel-size 4 --sequence-parallel",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        ap_megatron m;
        if (expect_read(lines[i], &m))
            CHECK(m.tp == 4 && m.sp == 1 && m.launcher.nproc == 8);
    }
    static const struct {
        const char *line, *says;
    } refused[] = {
        {"torchrun pretrain_gpt.py --tensor-model-parallel-size 4 + --sequence-parallel",
         "+: not a flag, and --tensor-model-parallel-size before it takes one value"},
        {"torchrun pretrain_gpt.py --sequence-parallel \\\n+ --tensor-model-parallel-size 4",
         "--sequence-parallel +: --sequence-parallel is a switch"},
        {"torchrun pretrain_gpt.py --bf16 ++ --tensor-model-parallel-size 4",
         "--bf16 ++: --bf16 is a switch"},
        {"torchrun pretrain_gpt.py --tensor-model-parallel-size 4 --bf16 set",
         "--bf16 set: --bf16 is a switch"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        expect_refused(refused[i].line, refused[i].says);
}

/* bash reads a comment to the end of its line, a trailing backslash
 * included, and the newline after it ends the command: in a launch
 * continued over lines, a commented-out flag cuts off every flag after it,
 * which bash then runs as a command of its own. Such a line is refused,
 * naming the comment's line and the first flag cut off, where the command
 * it ends reached the training script; a list of flags without a launch,
 * a script's array (whose comments bash allows) and a comment after the
 * launch's last line keep reading. */
static void a_comment_inside_a_continued_launch_ends_it(void)
{
    static const struct {
        const char *line, *says;
    } refused[] = {
        {"torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 4 \\\n"
         "  # --pipeline-model-parallel-size 2 \\\n"
         "  --sequence-parallel \\\n"
         "  --bf16",
         "--megatron-args: line 2, \"# --pipeline-model-parallel-size 2 \\\": a comment inside "
         "a continued command ends it"},
        {"torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 4 \\\n"
         "  # --pipeline-model-parallel-size 2 \\\n"
         "  --sequence-parallel \\\n",
         "so --sequence-parallel and the flags after it never reach Megatron-LM; move the "
         "comment out of the command or delete the line"},
        {"python pretrain_gpt.py \\\n  --tensor-model-parallel-size 4 \\\n"
         "  # --pipeline-model-parallel-size 2\n  --bf16",
         "line 3, \"# --pipeline-model-parallel-size 2\": a comment inside a continued "
         "command ends it"},
        {"torchrun pretrain_gpt.py --tensor-model-parallel-size 4 \\\n"
         "  --sequence-parallel  # SP on \\\n  --bf16",
         "line 2, \"# SP on \\\": a comment inside a continued command ends it (bash reads"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        expect_refused(refused[i].line, refused[i].says);
    static const char *const read[] = {
        "--tensor-model-parallel-size 4 \\\n  # --pipeline-model-parallel-size 2 \\\n"
        "  --sequence-parallel",
        "ARGS=( --tensor-model-parallel-size 4  # note\n  --sequence-parallel )\n"
        "torchrun pretrain_gpt.py ${ARGS[@]}",
        "torchrun pretrain_gpt.py --tensor-model-parallel-size 4 --sequence-parallel\n"
        "# then the evaluation \\\nexport STAGE=eval",
        "torchrun pretrain_gpt.py \\\n  --tensor-model-parallel-size 4 \\\n"
        "  --sequence-parallel\n  # --bf16 zz",
    };
    for (size_t i = 0; i < sizeof read / sizeof read[0]; i++) {
        ap_megatron m;
        if (expect_read(read[i], &m))
            CHECK(m.tp == 4 && m.sp == 1 && m.pp == 1);
    }
}

/* Asserts of Megatron-LM's validate_args and choices of its argparse that
 * a line can break on its own (arguments.py at 000c4ac2): the run stops
 * there, so the line is refused rather than priced. */
static void lines_megatron_lm_stops_are_refused(void)
{
    static const struct {
        const char *line, *says;
    } refused[] = {
        /* Sequence parallelism is turned off at tp 1 before the assert. */
        {"--tp-comm-overlap --micro-batch-size 1",
         "--tp-comm-overlap at tensor-parallel size 1: Megatron-LM's validate_args turns "
         "sequence parallelism off at tp 1 and then asserts it"},
        {"--tensor-model-parallel-size 1 --sequence-parallel --tp-comm-overlap",
         "--tp-comm-overlap at tensor-parallel size 1"},
        {"--model-parallel-size 1 --tp-comm-overlap", "--tp-comm-overlap at tensor-parallel"},
        {"--recompute-granularity none", "--recompute-granularity: bad value \"none\" (full "
                                          "or selective, Megatron-LM's argparse choices; leave "
                                          "the flag out for no recomputation)"},
        {"--recompute-granularity selectiv", "bad value \"selectiv\" (full or selective"},
        {"--no-position-embedding", "--no-position-embedding with learned absolute positions "
                                    "(no --position-embedding-type, Megatron-LM's default): "
                                    "Megatron-LM's validate_args raises \"--no-position-"
                                    "embedding is deprecated, use --position-embedding-type\""},
        {"--position-embedding-type none --no-position-embedding",
         "--no-position-embedding with no positions (--position-embedding-type none)"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        expect_refused(refused[i].line, refused[i].says);
    /* At tp 2 with sequence parallelism the overlap runs; under rotary
     * positions --no-position-embedding changes nothing, however they
     * were asked for. */
    static const char *const read[] = {
        "--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap",
        "--position-embedding-type rope --no-position-embedding",
        "--use-rotary-position-embeddings --no-position-embedding",
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
    };
    for (size_t i = 0; i < sizeof read / sizeof read[0]; i++) {
        ap_megatron m;
        expect_read(read[i], &m);
    }
}

/* --window-size is read as Megatron-LM's tuple_type reads it, "L,R" or
 * "(L,R)", quoted or not, and kept as the L + 1 keys each query meets (-1
 * for L = -1, no window); --window-attn-skip-freq is kept as given, its
 * layers read against the model's. Neither is a flag autopar notes as
 * unknown or refuses any more. */
static void window_flags_are_read(void)
{
    const char *lines[] = {"--window-size 4095,0", "--window-size (4095,0)",
                           "--window-size '4095,0'", "--window-size=\"(4095,0)\""};
    for (int i = 0; i < 4; i++) {
        ap_megatron m;
        char err[AP_ERR_LEN];
        ap_megatron_default(&m);
        REQUIRE_OK(ap_megatron_parse_args(lines[i], &m, err), err);
        CHECK(m.shape.window == 4096);
        CHECK(m.unknown[0] == '\0');
    }
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--window-size -1,0 --window-attn-skip-freq "
                                      "'([1]*3+[0])*12'", &m, err), err);
    CHECK(m.shape.window == -1);
    CHECK(!strcmp(m.shape.window_freq, "([1]*3+[0])*12"));
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--window-size 0,0", &m, err) == AP_OK && m.shape.window == 1);
    CHECK(ap_megatron_parse_args("--window-size 128,1", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron-args: --window-size 128,1: R = 1 lets each query meet keys "
                       "after it, which causal attention does not");
}

/* --ddp-num-buckets sets Megatron-LM's bucket size itself (the rank's
 * parameters over N), and get_model asserts against both; alone it is
 * read past with its value, and --ddp-bucket-size alone is priced. */
static void bucket_count_and_size_are_not_both_given(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--overlap-grad-reduce --ddp-num-buckets 4 "
                                 "--ddp-bucket-size 1000000", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron-args: --ddp-num-buckets with --ddp-bucket-size: "
                       "Megatron-LM asserts");
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--overlap-grad-reduce --ddp-num-buckets 4", &m, err),
               err);
    CHECK(m.run.ddp_bucket == 0);
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--overlap-grad-reduce --ddp-bucket-size 1000000", &m,
                                      err), err);
    CHECK(m.run.ddp_bucket == 1000000);
}

/* However many, the note stays in its buffer, whole flags only. */
static void many_unknown_flags_fit_their_note(void)
{
    char line[4096] = "";
    for (int i = 0; i < 200; i++) {
        char one[32];
        snprintf(one, sizeof one, "--unknown-flag-%03d ", i);
        strcat(line, one);
    }
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args(line, &m, err), err);
    size_t n = strlen(m.unknown);
    CHECK(n > 0 && n < sizeof m.unknown);
    CHECK_STR_HAS(m.unknown, "--unknown-flag-000");
    /* It ends with a whole flag's three digits. */
    CHECK(n >= 18 && !strncmp(m.unknown + n - 18, "--unknown-flag-", 15));
}

int main(void)
{
    RUN(megatron_lm_flags_of_every_era_are_known);
    RUN(switches_are_the_options_that_take_no_value);
    RUN(the_nearest_flag_is_within_two_edits);
    RUN(a_typo_is_noted_and_a_real_line_is_not);
    RUN(many_unknown_flags_fit_their_note);
    RUN(a_flag_and_its_value_may_be_joined_by_equals);
    RUN(shell_comments_are_not_read);
    RUN(quoted_flags_with_values_are_split);
    RUN(yaml_keys_read_as_flags);
    RUN(yaml_booleans_in_any_case);
    RUN(words_that_are_no_flag_are_refused);
    RUN(the_launch_around_the_flags_is_read_past);
    RUN(a_word_after_a_switch_read_past_is_refused);
    RUN(a_flag_assigned_to_a_variable_is_refused);
    RUN(a_bash_x_trace_reads_as_the_command_it_ran);
    RUN(a_comment_inside_a_continued_launch_ends_it);
    RUN(lines_megatron_lm_stops_are_refused);
    RUN(window_flags_are_read);
    RUN(bucket_count_and_size_are_not_both_given);
    return DONE();
}
