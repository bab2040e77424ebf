import type { Command } from 'commander';
import { codecFromEnv, ConnectionConfigError } from '../connection';
import { startCodecServer } from '../connection/codecServer';
import { DEFAULTS } from '../shared/paths';
import { CliError, EXIT } from './exit';

export function register(program: Command): void {
  program.command('codec-server')
    .description('serve the payload codec over HTTP so the Web UI and `temporal` CLI can show encrypted payloads decoded')
    .option('--port <n>', 'port to listen on', '8081')
    .option('--host <ip>', 'address to bind (keep it private: anyone who reaches it can decrypt)', '127.0.0.1')
    .option('--origin <url...>', 'Web UI origin(s) allowed by CORS', [DEFAULTS.temporalUi, DEFAULTS.temporalUi.replace('127.0.0.1', 'localhost')])
    .addHelpText('after', '\nNeeds RATCHET_CODEC_KEY (and RATCHET_CODEC_PREVIOUS_KEYS for older payloads); RATCHET_CODEC_SERVER_TOKEN,\n' +
      'when set, is required as "Authorization: Bearer <token>". In the Web UI: Settings (top right) > Codec Server,\n' +
      'endpoint http://127.0.0.1:8081. CLI: temporal workflow show -w <id> --codec-endpoint http://127.0.0.1:8081\n\n' +
      'Examples:\n  $ RATCHET_CODEC_KEY=$(cat ~/.ratchet-codec-key) ratchet codec-server --port 8081')
    .action(async (opts: { port: string; host: string; origin: string[] }) => {
      const port = Number(opts.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port ${opts.port} is not a port. Fix: 1-65535`, EXIT.usage);
      let codec;
      try {
        codec = codecFromEnv();
      } catch (err) {
        if (err instanceof ConnectionConfigError) throw new CliError(err.message, EXIT.invalidInput);
        throw err;
      }
      if (!codec) throw new CliError('RATCHET_CODEC_KEY is not set, so there is nothing to decode with. Fix: export the key the workers use', EXIT.invalidInput);
      const srv = await startCodecServer({ codec, origins: opts.origin, host: opts.host, port, token: process.env.RATCHET_CODEC_SERVER_TOKEN || undefined });
      console.log(`codec server on http://${opts.host}:${srv.port} (key id ${codec.keyId}; CORS for ${opts.origin.join(', ')})`);
      await new Promise<void>((resolve) => {
        const stop = () => { void srv.close().then(resolve); };
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      });
    });
}
