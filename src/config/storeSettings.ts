import type { StoreSettings } from '../artifacts/settings';
import type { ArtifactsConfig } from './schema';

/**
 * The store settings of the run config's [artifacts] (never a credential), which the run's
 * activities carry, or undefined for the workers' default store. Pure: workflow code imports it.
 */
export function storeSettings(a: ArtifactsConfig | undefined): StoreSettings | undefined {
  if (!a || (!a.url && !a.root)) return undefined;
  const out: StoreSettings = {};
  for (const k of ['url', 'root', 'endpoint', 'region', 'force_path_style'] as const) {
    if (a[k] !== undefined) (out as Record<string, unknown>)[k] = a[k];
  }
  return out;
}
