/**
 * The settings a store is built from (storeFor, ./stores.ts): what a run's activities carry of
 * its config's [artifacts] (src/config/storeSettings.ts), never a credential, so a worker on any
 * host writes where the run says. Pure: workflow code imports it.
 */
export interface StoreSettings {
  /** file:///dir or s3://bucket/prefix. */
  url?: string;
  /** Legacy spelling of a file:// url: a local directory. */
  root?: string;
  endpoint?: string;
  region?: string;
  force_path_style?: boolean;
}
