"""A test-only workflow that drives the trainer activities the way TrainRun does:
announce, load, then step+save per batch; when a step fails (dead worker), it
announces again and loads the last checkpoint on the new worker before retrying."""

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

ONCE = RetryPolicy(maximum_attempts=1)


@workflow.defn(name="TrainerRecoveryTestFlow")
class TrainerRecoveryTestFlow:
    @workflow.run
    async def run(self, a: dict) -> dict:
        async def announce() -> str:
            r = await workflow.execute_activity("trainer.announce", {}, task_queue=a["shared_queue"],
                                                start_to_close_timeout=timedelta(seconds=30),
                                                schedule_to_close_timeout=timedelta(minutes=5))
            return r["task_queue"]

        async def load(queue: str, ckpt):
            return await workflow.execute_activity(
                "trainer.load", {"run_id": a["run_id"], "trainer_config": a["trainer_config"], "checkpoint": ckpt},
                task_queue=queue, start_to_close_timeout=timedelta(minutes=3), retry_policy=ONCE)

        queue, ckpt, results, recoveries, step = await announce(), None, [], 0, 0
        failures: list[dict] = []
        await load(queue, None)
        while step < len(a["batches"]):
            b = a["batches"][step]
            try:
                m = await workflow.execute_activity(
                    "trainer.step", {"run_id": a["run_id"], "step": step, "batch": b[0], "manifest": b[1],
                                     **({"liveness": a["liveness"]} if a.get("liveness") else {})},
                    task_queue=queue, start_to_close_timeout=timedelta(minutes=5),
                    schedule_to_start_timeout=timedelta(seconds=60),
                    heartbeat_timeout=timedelta(seconds=a.get("step_heartbeat_timeout_s", 60)), retry_policy=ONCE)
                saved = await workflow.execute_activity(
                    "trainer.save", {"run_id": a["run_id"], "step": step,
                                     **({"liveness": a["liveness"]} if a.get("liveness") else {})}, task_queue=queue,
                    start_to_close_timeout=timedelta(minutes=2),
                    heartbeat_timeout=timedelta(seconds=a.get("step_heartbeat_timeout_s", 60)), retry_policy=ONCE)
            except ActivityError as e:
                cause = e.cause
                failures.append({"step": step, "type": getattr(cause, "type", None) or type(cause).__name__,
                                 "details": list(getattr(cause, "details", None) or [])})
                recoveries += 1
                queue = await announce()
                await load(queue, ckpt)
                continue
            ckpt = saved["checkpoint"]
            results.append({"metrics": m, "saved": saved, "queue": queue})
            step += 1
        return {"results": results, "recoveries": recoveries, "failures": failures}
