import pino from 'pino';

/** The one root logger. Modules take a child with their own `component` field. */
export const logger = pino({
  level: process.env.RATCHET_LOG_LEVEL ?? 'info',
  base: { app: 'ratchet' },
  timestamp: pino.stdTimeFunctions.isoTime,
});

export function componentLogger(component: string): pino.Logger {
  return logger.child({ component });
}

export type Logger = pino.Logger;
