/**
 * The sandbox image a rollout ran in, by id: `docker image inspect`'s Id (`sha256:...`, the
 * image's content) and RepoDigests (where a registry serves it), for the step's lineage.
 * Inspected once per image name and cached: a rollout worker runs thousands of rollouts
 * on a handful of images. A name that fails to inspect is not cached (asked again next time).
 */
import type Docker from 'dockerode';

export interface ImageDigest {
  name: string;
  /** `sha256:...`: the image's config digest, what `docker image inspect --format '{{.Id}}'` prints. */
  id: string;
  repo_digests: string[];
}

/** What is used of dockerode: `getImage(name).inspect()`. Tests pass a fake. */
export type ImageInspector = Pick<Docker, 'getImage'>;

export function createImageDigests(docker: ImageInspector): (name: string) => Promise<ImageDigest> {
  const cache = new Map<string, Promise<ImageDigest>>();
  return (name) => {
    let hit = cache.get(name);
    if (!hit) {
      hit = (async () => {
        const info = await docker.getImage(name).inspect();
        if (typeof info.Id !== 'string' || !info.Id) throw new Error(`docker image inspect ${name} returned no Id`);
        return { name, id: info.Id, repo_digests: [...(info.RepoDigests ?? [])].sort() };
      })();
      cache.set(name, hit);
      hit.catch(() => cache.delete(name));
    }
    return hit;
  };
}
