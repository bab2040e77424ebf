import type { ArtifactsConfig } from './schema';

/**
 * The store settings a run's activities carry (the run config's [artifacts],
 * never a credential), so a worker on any host writes where the run says.
 * Pure: workflow code imports it.
 */
export type StoreSettings = Pick<ArtifactsConfig, 'url' | 'root' | 'endpoint' | 'region' | 'force_path_style'>;

/** The settings to pass along, or undefined for the workers' default store. */
export function storeSettings(a: ArtifactsConfig | undefined): StoreSettings | undefined {
  if (!a || (!a.url && !a.root)) return undefined;
  const out: StoreSettings = {};
  for (const k of ['url', 'root', 'endpoint', 'region', 'force_path_style'] as const) {
    if (a[k] !== undefined) (out as Record<string, unknown>)[k] = a[k];
  }
  return out;
}
