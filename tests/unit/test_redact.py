from trainmon.agent._redact import MASK, redact_argv


def test_secrets_are_masked_and_the_rest_kept():
    argv = [
        "train.py",
        "--password=hunter2",
        "--token",
        "abc123",
        "WANDB_API_KEY=xyz",
        "AWS_SECRET_ACCESS_KEY=s",
        "--data",
        "s3://user:pw@bucket/path",
        "--lr",
        "0.1",
        "--hf-token=t0k",
        "--apikey",
        "k",
    ]
    out = redact_argv(argv)
    joined = " ".join(out)
    for secret in ("hunter2", "abc123", "xyz", "=s ", "pw@", "t0k", " k"):
        assert secret not in joined + " "
    assert out[0] == "train.py" and "--lr" in out and "0.1" in out and "--data" in out
    assert f"--password={MASK}" in out and out[out.index("--token") + 1] == MASK
    assert f"s3://user:{MASK}@bucket/path" in out


def test_plain_arguments_untouched():
    argv = ["python", "-m", "torch.distributed.run", "--nproc-per-node=2", "train.py", "--epochs", "3"]
    assert redact_argv(argv) == argv
