"""train_single.py — a complete program that trains the labs' Fashion-MNIST CNN with
cohort's Python binding: the input pipeline, SGD with momentum, a few epochs, then
images/sec and the test accuracy. This is the solution: every TODO of
../train_single.py done the Horovod way, so the same program runs on 1 process or on N
ranks:

    python3 train_single.py --num_epochs=3
    cohortrun -np 2 -- python3 train_single.py --num_epochs=3
    cohort-check accelerate train_single.py

Every flag is a key of cohort's option registry (--batch_size=64, --lr=0.05,
--data_dir=..., --json for the run-summary line, --checkpoint_dir=DIR to save the trained
model there, --resume to continue from it); see `cohort-options`.
"""
import sys
import time

import numpy as np

import cohort

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def preset(cfg, key, value):
    """Sets an option unless the command line or a COHORT_<KEY> variable chose it."""
    if not cfg.is_explicit(key):
        cfg[key] = value


class Program:
    def __init__(self, cfg):
        self.cfg = cfg
        # TODO 1 — create the runtime of the whole job, and use the local rank's device
        # (Horovod: hvd.init(), then pin the GPU of hvd.local_rank()). world=job spans
        # every rank cohortrun started; the device (device=auto, the default) is then the
        # GPU of the local rank, or on a CPU its share of the cores (cores / local ranks).
        cfg["world"] = "job"
        # END TODO 1
        self.rt = cohort.Runtime(cfg)
        self.rank, self.size = self.rt.rank, self.rt.size

    def say(self, *args):
        """Prints one line of the program's report."""
        # TODO 6 — only rank 0 prints (Horovod: `if hvd.rank() == 0`). The checkpoint calls
        # stay outside any such test: every rank calls them, and rank 0 alone writes or
        # reads the file (see save() and resume()).
        if self.rank != 0:
            return
        # END TODO 6
        print(*args, flush=True)

    def reduce_metrics(self, values):
        """The run's metrics as the report gives them: values[0] is a loss, the others rates."""
        values = np.array(values, dtype=np.float64)
        # TODO 5 — average the metrics over the ranks (Horovod: MetricAverageCallback): the
        # loss is the mean of the ranks' losses, images/sec the sum of their rates.
        self.rt.allreduce(values, "metrics", op="sum")
        values[0] /= self.size
        # END TODO 5
        return values

    def open_pipelines(self):
        # TODO 2 — shard the data: with the runtime, a pipeline reads only this rank's share
        # of every epoch, disjoint from the other ranks' (Horovod: dataset.shard(size, rank)).
        shard_by = self.rt
        # END TODO 2
        self.train = cohort.Pipeline(shard_by, self.cfg)
        self.test = cohort.Pipeline(shard_by, self.cfg, data_split="validation", shuffle=False)

    def create_optimizer(self, model):
        opt_cfg = self.cfg.clone()
        preset(opt_cfg, "optimizer", "momentum")
        preset(opt_cfg, "momentum", 0.9)
        preset(opt_cfg, "lr", 0.05)
        # TODO 3 — wrap the optimizer as distributed and scale the learning rate, with
        # warm-up (Horovod: hvd.DistributedOptimizer, lr × hvd.size(), the warm-up callback).
        # An optimizer averages its gradients over the ranks of its model's runtime (TODO 1
        # makes that the job); lr_scaling=linear multiplies lr by the global batch over
        # base_batch_size, which with base_batch_size = the batch of one rank is the number
        # of ranks; warmup_epochs ramps from lr to the scaled rate.
        preset(opt_cfg, "lr_scaling", "linear")
        preset(opt_cfg, "base_batch_size", self.cfg["batch_size"])
        preset(opt_cfg, "warmup_epochs", 1.0)
        # END TODO 3
        return cohort.Optimizer(model, opt_cfg)

    def resume(self, opt, directory):
        """Resumes from the latest checkpoint of `directory` (with --resume): the parameters,
        the optimizer's state and step count, and where the epochs and the training data
        were; returns the epochs done. Collective: every rank calls it; rank 0 reads the
        file, and its values reach every rank."""
        ck = opt.load_checkpoint(directory)
        if ck is None:
            return 0
        self.train.seek(ck.pipeline_epoch, ck.pipeline_step)
        self.say(f"resumed from {directory} after epoch {ck.epoch}")
        return ck.epoch

    def save(self, opt, directory, epochs, last, pipeline_steps):
        """Saves the run into `directory`: `epochs` are done and the training data continues
        after the batch `last`. Collective: every rank calls it; rank 0 writes the file."""
        at_end = last.step + 1 == pipeline_steps
        opt.save_checkpoint(directory, epoch=epochs, pipeline_epoch=last.epoch + at_end,
                            pipeline_step=0 if at_end else last.step + 1)

    def run(self):
        wall_start = time.monotonic()
        model = cohort.Model(self.rt, "mnist_cnn", self.cfg)
        self.open_pipelines()
        opt = self.create_optimizer(model)
        metrics = cohort.Metrics(self.cfg["num_warmup_batches"])
        info = self.train.info()
        batch, epochs = info.batch_size, max(1, int(self.cfg["num_epochs"]))
        # TODO 7 — divide the steps per epoch by the number of ranks: each rank takes one
        # batch per step, so an epoch of the whole dataset takes size times fewer steps.
        steps_per_epoch = info.dataset_size // (batch * self.size)
        # END TODO 7
        if steps_per_epoch < 1:
            sys.exit(f"train_single: {info.dataset_size} images are fewer than one batch per rank")
        opt.set_run_length(steps_per_epoch, steps_per_epoch * epochs)

        # TODO 4 — broadcast the initial parameters from rank 0, so that every rank starts
        # from the same model (Horovod: BroadcastGlobalVariablesCallback(0)).
        opt.broadcast(0)
        # END TODO 4
        checkpoint_dir = self.cfg["checkpoint_dir"]
        first_epoch = self.resume(opt, checkpoint_dir) if checkpoint_dir and self.cfg["resume"] else 0

        self.say(f"Fashion-MNIST CNN: {info.dataset_size} training images, batch {batch}, {steps_per_epoch} steps "
                 f"per epoch, {epochs} epochs, on {self.rt.device}")
        steps, last_loss, last = 0, 0.0, None
        for epoch in range(first_epoch, epochs):
            loss_sum, images, epoch_start = 0.0, 0, time.monotonic()
            for _ in range(steps_per_epoch):
                t0 = time.monotonic()
                b = self.train.next()
                t1 = time.monotonic()
                st = model.train_step(opt, b)
                metrics.record(time.monotonic() - t0, b.valid, data_wait_s=t1 - t0, comm_exposed_s=st.comm_wait_s)
                loss_sum += st.loss
                images += b.valid
                last_loss, last = st.loss, b
                steps += 1
            loss, rate = self.reduce_metrics([loss_sum / steps_per_epoch, images / (time.monotonic() - epoch_start)])
            self.say(f"epoch {epoch + 1}: loss {loss:.4f}, {rate:.1f} images/sec")

        ev = model.evaluate(self.test)
        rates = metrics.summary()
        final_loss, rates.median, rates.mean = self.reduce_metrics([last_loss, rates.median, rates.mean])
        self.say(f"images/sec: {rates.median:.1f}\ntest accuracy: {ev.top1:.4f} ({ev.samples} images)")
        if self.cfg["json"]:
            self.say(cohort.run_summary_json(
                "mnist_cnn", ranks=self.size, local_ranks=self.rt.local_size, device=self.rt.device,
                data=self.cfg["data_dir"], batch_per_rank=batch, global_batch=batch * self.size, steps=steps,
                warmup_steps=self.cfg["num_warmup_batches"], images_per_sec=rates, epochs=float(epochs),
                loss=float(final_loss), top1=ev.top1, top5=ev.top5, wall_s=time.monotonic() - wall_start))
        if checkpoint_dir and steps > 0:
            self.save(opt, checkpoint_dir, epochs, last, info.steps_per_epoch)


def main(argv):
    cfg = cohort.Config()
    try:
        rest = cfg.parse_args(argv, strict=True)
        if len(rest) > 1:
            sys.exit(f"train_single: unexpected argument '{rest[1]}' (options are --key=value)")
        preset(cfg, "data_dir", FASHION_MNIST)
        preset(cfg, "augment", "none")
        preset(cfg, "num_epochs", 3.0)
        program = Program(cfg)
        with program.rt:  # closing the runtime closes the models, pipelines and optimizers made from it
            program.run()
    except cohort.CohortError as e:
        sys.exit(f"train_single: {e}")


if __name__ == "__main__":
    main(sys.argv)
