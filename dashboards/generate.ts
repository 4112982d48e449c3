/** CLI: writes dashboards/averaging-swarm.json from dashboards/averaging-swarm.ts (npm run generate:dashboard). */
import { writeFileSync } from 'node:fs'
import { DASHBOARD_FILE, renderDashboardJson } from './averaging-swarm.js'

writeFileSync(DASHBOARD_FILE, renderDashboardJson())
console.log(`wrote ${DASHBOARD_FILE}`)
