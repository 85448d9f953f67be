"""Named demo scenarios: real small trainings, each with one known bottleneck.

Each runs for a fixed time (about 20 s; the hang about a minute) whatever the machine's speed, on CPU here and
on CUDA where present (``--device cuda`` is added when a GPU is visible). Where the verdict rests on a balance
between the model's step and a cost given in time (a decoding's milliseconds, a pause), the model is sized to the
host at start-up (``--step-ms``), so a slower host gives the same balance.
"""

from __future__ import annotations

from trainmon.demo.scenario_command import Scenario, command

__all__ = ["DEFAULT", "SCENARIOS", "Scenario", "command"]


# The model's step on this host, timed at start-up (--step-ms sizes its width): the times the widths 4096, 2048, 1024
# and 768 take on the host the scenarios were written on, so a slower host trains a narrower model at the same pace
WIDE, MEDIUM, NARROW, SMALL = "85", "16", "4", "2.3"
SECONDS = ("--seconds", "20", "--steps", "1000000")
STEADY = ("--seconds", "15", "--steps", "1000000")  # one cause all along: nothing to count, no warm-up to outweigh
EPOCHS = ("--workers", "4", "--epoch-batches", "15", "--worker-setup-ms", "300", "--step-ms", WIDE, *SECONDS)
# trainmon.demo.gpt: nanoGPT's loop, no DataLoader; its model's part of a step sized to the host (--model-ms)
GPT = ("--seconds", "15", "--log-interval", "20", "--model-ms", "45")
# trainmon.demo.compiled, with torch.compile's aot_eager backend: it traces and compiles the forward and backward graphs
# as inductor does, without generating kernels (a C++ compilation each on CPU: minutes per storm on a busy 2-core host)
COMPILED = ("--seconds", "18", "--backend", "aot_eager")
LIGHTNING = (
    "--workers",
    "1",
    "--cpu-ms",
    "1.0",
    "--epoch-batches",
    "120",
    "--eval-every",
    "50",
    "--eval-batches",
    "10",
    *SECONDS,
)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "healthy",
            "ok.compute_bound",
            "two workers keep well ahead of a compute-heavy model: nothing starves",
            ("--workers", "2", "--cpu-ms", "0.02", "--step-ms", WIDE, "--persistent", *SECONDS),
        ),
        Scenario(
            "main-process",
            "input.main_process",
            "num_workers=0 and 1.5 ms of decoding per sample: the loop loads every batch itself",
            ("--workers", "0", "--cpu-ms", "1.5", *STEADY),
        ),
        Scenario(
            "few-workers",
            "input.too_few_workers",
            "one worker decodes 1 ms per sample, busy all the time, while a core sits idle",
            ("--workers", "1", "--cpu-ms", "1.0", "--persistent", *STEADY),
        ),
        Scenario(
            "cpu-saturated",
            "input.workers_cpu",
            "four workers with heavy augmentation (3 ms per sample) on a host whose cores are all busy",
            ("--workers", "4", "--cpu-ms", "3.0", "--step-ms", SMALL, "--persistent", *STEADY),
        ),
        Scenario(
            "slow-storage",
            "input.io",
            "every sample costs 48 uncached 4 KiB random reads (O_DIRECT) from a real file",
            ("--workers", "2", "--io-reads", "48", "--io-mb", "256", "--persistent", *STEADY),
        ),
        Scenario(
            "remote-storage",
            "input.io",
            "every sample is an HTTP GET (urllib.request) from a slow loopback object store: 3 ms, 256 KiB",
            ("--workers", "2", "--remote-latency-ms", "3", "--remote-kb", "256", "--persistent", *STEADY),
        ),
        Scenario(
            "rate-limited",
            "input.too_few_workers",
            "each worker takes 250 samples/s from a token bucket (a threading.Condition) and keeps the "
            "connection it fetched its manifest over open: slow per sample, not remote",
            (
                "--workers",
                "2",
                "--rate-limit",
                "250",
                "--remote-latency-ms",
                "3",
                "--remote-kb",
                "16",
                "--manifest",
                "--persistent",
                *STEADY,
            ),
        ),
        Scenario(
            "checkpoint",
            "stall.checkpoint",
            "a 96 MB checkpoint written and fsynced every 10 steps",
            (
                "--workers",
                "2",
                "--persistent",
                "--step-ms",
                NARROW,
                "--checkpoint-every",
                "10",
                "--checkpoint-mb",
                "96",
                *SECONDS,
            ),
        ),
        Scenario(
            "periodic-eval",
            "stall.periodic",
            "an evaluation pass over 20 batches every 20 steps stalls training",
            (
                "--workers",
                "2",
                "--persistent",
                "--step-ms",
                MEDIUM,
                "--eval-every",
                "20",
                "--eval-batches",
                "20",
                *SECONDS,
            ),
        ),
        Scenario(
            "gc",
            "stall.periodic",
            "each step keeps a Python tree of 6000 nodes with reference cycles for 8 steps: gen-2 garbage "
            "collections scan them all, and the loop stops for each",
            (
                "--workers",
                "2",
                "--cpu-ms",
                "0.02",
                "--step-ms",
                WIDE,
                "--persistent",
                "--trace-nodes",
                "6000",
                "--trace-keep",
                "8",
                *SECONDS,
            ),
        ),
        Scenario(
            "hang",
            "stall.hang",
            "after 6 s a log rotation thread and the loop take two locks in opposite orders: a deadlock, with "
            "the process and its workers alive, until faulthandler's 18 s watchdog ends it (judged with "
            "hang_min_s = 12)",
            (
                "--workers",
                "2",
                "--cpu-ms",
                "0.02",
                "--step-ms",
                WIDE,
                "--persistent",
                "--hang-after",
                "6",
                "--watchdog-s",
                "18",
                "--seconds",
                "120",
                "--steps",
                "1000000",
            ),
            status=1,
            thresholds=(("hang_min_s", 12.0),),
        ),
        Scenario(
            "freeze",
            "stall.hang",
            "a background thread uploads metrics under the loop's log lock; after 6 s the collector stops answering "
            "and the upload waits out its 12 s socket timeout, the loop blocked on the lock: a freeze that resumes "
            "(judged with hang_min_s = 8)",
            (
                "--workers",
                "2",
                "--cpu-ms",
                "0.02",
                "--step-ms",
                NARROW,
                "--persistent",
                "--upload-stall-after",
                "6",
                "--upload-timeout-s",
                "12",
                "--seconds",
                "26",
                "--steps",
                "1000000",
            ),
            thresholds=(("hang_min_s", 8.0),),
        ),
        Scenario(
            "straggler",
            "dist.straggler",
            "two ranks (gloo DDP); rank 1's data loads 1 ms slower per sample, rank 0 waits in all-reduce",
            ("--workers", "0", "--slow-rank", "1", "--slow-sleep-ms", "1", *STEADY),
            ranks=2,
        ),
        Scenario(
            "compute-straggler",
            "dist.straggler",
            "two ranks (gloo DDP); rank 1's forward does 20 more matmuls, as a slower or throttled device would: "
            "step times stay equal, rank 0 waits in the all-reduce",
            ("--workers", "0", "--extra-matmuls", "20", "--extra-rank", "1", *STEADY),
            ranks=2,
        ),
        Scenario(
            "comm-bound",
            "dist.comm",
            "two ranks (gloo DDP) all-reduce the gradients of 4.7 M parameters after 4 samples of compute each",
            ("--workers", "0", "--width", "2048", "--batch-size", "4", *STEADY),
            ranks=2,
        ),
        Scenario(
            "ddp-healthy",
            "ok.compute_bound",
            "two balanced ranks (gloo DDP): 128 samples of compute-heavy work per step, loaded in the main process in "
            "about 3 % of it, 134 k parameters to reduce",
            ("--workers", "0", "--width", "256", "--batch-size", "128", "--extra-matmuls", "120", *SECONDS),
            ranks=2,
        ),
        Scenario(
            "switch",
            "input.main_process",
            "data loads in the main process for 18 s, then two workers take over: the cause changes halfway",
            (
                "--workers",
                "0",
                "--cpu-ms",
                "1.5",
                "--step-ms",
                WIDE,
                "--switch-at",
                "0.6",
                "--seconds",
                "24",
                "--steps",
                "1000000",
            ),
            timeline=("input.main_process", "ok.compute_bound"),
        ),
        Scenario(
            "late-input",
            "input.main_process",
            "num_workers=0 and cheap samples for 18 s, then each sample needs 1.5 ms of decoding (a heavier "
            "augmentation schedule, the same DataLoader) for the last 12 s: input-bound for less than the live window",
            (
                "--workers",
                "0",
                "--step-ms",
                WIDE,
                "--switch-at",
                "0.6",
                "--switch-in-place",
                "--switch-cpu-ms",
                "1.5",
                "--seconds",
                "24",
                "--steps",
                "1000000",
            ),
            timeline=("ok.compute_bound", "input.main_process"),
        ),
        Scenario(
            "late-fed",
            "input.main_process",
            "num_workers=0 and 1.5 ms of decoding per sample for 18 s, then cheap samples (a cache now holds them, the "
            "same DataLoader) for the last 12 s: compute-bound for less than the live window, at the end",
            (
                "--workers",
                "0",
                "--cpu-ms",
                "1.5",
                "--step-ms",
                WIDE,
                "--switch-at",
                "0.6",
                "--switch-in-place",
                "--switch-cpu-ms",
                "0",
                "--seconds",
                "24",
                "--steps",
                "1000000",
            ),
            timeline=("input.main_process", "ok.compute_bound"),
        ),
        Scenario(
            "lightning",
            "input.too_few_workers",
            "a plain Lightning fit: train and validation loaders with one CPU-bound worker each (1 ms per sample), "
            "validation of 10 batches every 50 steps inside 120-batch epochs, workers restarted by every epoch",
            LIGHTNING,
            module="trainmon.demo.lit",
        ),
        Scenario(
            "lightning-run",
            "input.too_few_workers",
            "the lightning fit with no trainmon in its code, attached through the environment as trainmon run attaches "
            "it: the agent gives the Trainer its callback; the train worker is judged while the loop consumed it",
            (*LIGHTNING, "--zero-code"),
            module="trainmon.demo.lit",
        ),
        Scenario(
            "cache-warm",
            "input.too_few_workers",
            "one persistent worker decodes 10 ms per sample into a cache of its own: the first epoch (about 10 s) "
            "misses and the loop waits on it, later epochs hit and the model's compute is the limit (one DataLoader)",
            (
                "--workers",
                "1",
                "--persistent",
                "--cache-samples",
                "--cpu-ms",
                "10",
                "--step-ms",
                WIDE,
                "--epoch-batches",
                "30",
                *SECONDS,
            ),
            timeline=("input.too_few_workers", "ok.compute_bound"),
        ),
        Scenario(
            "epoch-restart",
            "input.epoch_restart",
            "epochs of 15 batches without persistent_workers: 4 workers each build the dataset's index "
            "(300 ms of CPU) before their first sample, again at every epoch",
            EPOCHS,
        ),
        Scenario(
            "epoch-persistent",
            "ok.compute_bound",
            "the epoch-restart training with persistent_workers=True: the workers build their index once",
            (*EPOCHS, "--persistent"),
        ),
        Scenario(
            "epoch-steady",
            "input.too_few_workers",
            "one worker decodes 1 ms per sample in epochs of 150 batches, restarted each epoch at little cost: "
            "input-bound all along, never an epoch-restart verdict",
            ("--workers", "1", "--cpu-ms", "1.0", "--epoch-batches", "150", *SECONDS),
        ),
        Scenario(
            "recompile-storm",
            "stall.recompile",
            "a torch.compile'd text classifier (dynamic=False) fed length-grouped batches padded to their longest: "
            "every new length recompiles until the recompile limit sends the model back to eager",
            ("--dynamic", "false", *COMPILED),
            module="trainmon.demo.compiled",
        ),
        Scenario(
            "compiled-steady",
            "ok.compute_bound",
            "the same compiled classifier with every batch padded to max_length: one shape, compiled once",
            ("--pad", "max_length", *COMPILED),
            module="trainmon.demo.compiled",
        ),
        Scenario(
            "prefetcher",
            "input.too_few_workers",
            "article 001's DataLoaderX: a BackgroundGenerator thread iterates a DataLoader whose one worker decodes "
            "0.6 ms per sample; the loop waits on the generator's queue",
            ("--feed", "prefetch", "--workers", "1", "--cpu-ms", "0.6", "--persistent", *STEADY),
        ),
        Scenario(
            "thread-pool",
            "input.main_process",
            "a custom batch iterator decoding zlib-compressed samples on a 4-thread ThreadPoolExecutor, 4 batches "
            "ahead: the pool runs beside the loop, and does not keep up",
            ("--feed", "threadpool", "--decode-threads", "4", "--decode-kb", "64", *STEADY),
        ),
        Scenario(
            "loop-metrics",
            "host.loop_code",
            "two workers keep ahead while every step computes a confusion matrix and each class's F1 in Python "
            "over the last 300 batches and writes them as JSON",
            ("--workers", "2", "--persistent", "--step-ms", MEDIUM, "--metrics-window", "300", *STEADY),
        ),
        Scenario(
            "tqdm",
            "ok.compute_bound",
            "a tqdm bar over the DataLoader, its postfix set from loss.item() every step, two workers ahead of a "
            "compute-heavy model",
            ("--workers", "2", "--persistent", "--step-ms", MEDIUM, "--progress", *STEADY),
        ),
        Scenario(
            "gpt-get-batch",
            "input.main_process",
            "a nanoGPT-style loop with no DataLoader: its get_batch tokenizes random slices of a text corpus with a "
            "pure-Python byte-level BPE in the main thread, about half of each step",
            ("--tokenize", "live", *GPT),
            module="trainmon.demo.gpt",
        ),
        Scenario(
            "gpt-pretokenized",
            "ok.compute_bound",
            "the same nanoGPT-style loop over a corpus tokenized once before training: get_batch only slices token "
            "ids, a small share of the step",
            ("--tokenize", "ahead", *GPT),
            module="trainmon.demo.gpt",
        ),
        Scenario(
            "gpt-loader",
            "input.main_process",
            "the nanoGPT-style loop drawing its batches from a generator (a streaming dataset) wrapped in "
            "trainmon.agent.loader, each tokenized in the main thread when the loop asks for it",
            ("--tokenize", "live", "--source", "loader", *GPT),
            module="trainmon.demo.gpt",
        ),
    )
}
DEFAULT = "switch"
