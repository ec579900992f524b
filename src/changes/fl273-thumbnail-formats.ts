import type { ApiChange } from './types.js';

/**
 * Feature level 273 (Zulip 9.0): register's `server_thumbnail_formats`. An older server makes no
 * thumbnails, so it has none to name: `[]`, which the app assumed for it until its server-9
 * sweep made the key required.
 */
export const thumbnailFormats: ApiChange = {
  featureLevel: 273,
  feature: 'thumbnail_formats',
  register: {
    fields: ['server_thumbnail_formats'],
    fill: () => ({ server_thumbnail_formats: [] }),
  },
};
