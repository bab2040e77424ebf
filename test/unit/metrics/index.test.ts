import { rolloutsTotal, rolloutReward, runtimeTelemetryOptions, sandboxPool, startMetricsServer } from '../../../src/metrics';

describe('metrics endpoint', () => {
  it('serves Ratchet counters in Prometheus text format', async () => {
    const server = await startMetricsServer(0);
    try {
      rolloutsTotal.inc({ env: 'swe-grep', stop_reason: 'completed' }, 3);
      rolloutReward.observe({ env: 'swe-grep' }, 0.5);
      sandboxPool.set({ state: 'warm' }, 2);
      const body = await (await fetch(server.url)).text();
      expect(body).toContain('ratchet_rollouts_total{env="swe-grep",stop_reason="completed"} 3');
      expect(body).toContain('ratchet_sandbox_pool{state="warm"} 2');
      expect(body).toMatch(/ratchet_rollout_reward_bucket\{le="0.5",env="swe-grep"\} 1/);
      expect(body).toContain('ratchet_process_');
      expect((await fetch(server.url.replace('/metrics', '/nope'))).status).toBe(404);
    } finally {
      await server.close();
    }
  });
  it('a taken port fails with the fix', async () => {
    const a = await startMetricsServer(0);
    try {
      await expect(startMetricsServer(a.port)).rejects.toThrow(/RATCHET_METRICS_PORT/);
    } finally {
      await a.close();
    }
  });
  it('runtime telemetry options use the Prometheus exporter', () => {
    expect(runtimeTelemetryOptions('127.0.0.1:9464')).toEqual({ metrics: { prometheus: { bindAddress: '127.0.0.1:9464' } } });
  });
});
