package checks

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/pinion-health/pinion/deploy/checks/internal/deployfiles"
	"github.com/pinion-health/pinion/pkg/config"
)

// rendered is the output of one kustomization, decoded into API types.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	pdbs        []*policyv1.PodDisruptionBudget
	policies    []*networkingv1.NetworkPolicy
	ingresses   []*networkingv1.Ingress
	namespaced  []metav1.Object
}

// decoder decodes strictly (unknown or duplicate fields are errors) into
// the API types Pinion's manifests may use; any other kind is an error.
var decoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, corev1.AddToScheme, autoscalingv2.AddToScheme,
		policyv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// render runs kustomize (the library kubectl uses) on a directory of
// deploy/k8s, copied into an in-memory file system so nothing outside
// deploy/k8s can be read, and decodes every object.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	src := filepath.Join(root(t), deployfiles.K8sDir)
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		dst := filepath.Join("/k8s", rel)
		if d.IsDir() {
			return mem.MkdirAll(dst)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(dst, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, filepath.Join("/k8s", dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
	}
	for _, res := range m.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, gvk, err := decoder.Decode(y, nil, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", res.GetKind(), res.GetName(), err)
		}
		if o, ok := obj.(metav1.Object); ok && gvk.Kind != "Namespace" {
			r.namespaced = append(r.namespaced, o)
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			r.deployments[o.Name] = o
		case *corev1.Service:
			r.services[o.Name] = o
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.Secret:
			r.secrets[o.Name] = o
		case *autoscalingv2.HorizontalPodAutoscaler:
			r.hpas = append(r.hpas, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *networkingv1.NetworkPolicy:
			r.policies = append(r.policies, o)
		case *networkingv1.Ingress:
			r.ingresses = append(r.ingresses, o)
		case *corev1.Namespace:
		default:
			t.Fatalf("%s %s: a kind these checks do not know", gvk.Kind, res.GetName())
		}
	}
	return r
}

// runtimeVars are the environment variables besides PINION_ ones that a
// container may set: the Go runtime's.
var runtimeVars = map[string]bool{"GOMEMLIMIT": true}

func TestKustomizeBase(t *testing.T) {
	r := render(t, "base")
	checkWorkloads(t, r, false)
}

func TestKustomizeExampleOverlay(t *testing.T) {
	r := render(t, "overlays/example")
	checkWorkloads(t, r, true)
	for _, o := range r.namespaced {
		if o.GetNamespace() != "pinion" {
			t.Errorf("%s: namespace %q, want the overlay's", o.GetName(), o.GetNamespace())
		}
	}
	// The settings each process will read, from the ConfigMap, its Secrets
	// and its own env, must load, and satisfy what its main demands.
	for name, d := range r.deployments {
		c := d.Spec.Template.Spec.Containers[0]
		env := r.containerEnv(c)
		cfg, err := config.LoadFrom(func(k string) string { return env[k] })
		if err != nil {
			t.Errorf("%s: config.Load would fail: %v", name, err)
			continue
		}
		if cfg.NATSURL == "" || (name != "pinion-gateway" && cfg.MongoURI == "") {
			t.Errorf("%s: PINION_NATS_URL and (for services) PINION_MONGODB_URI are required", name)
		}
		if name == "pinion-identity" && cfg.SuperAdminSecret == "" {
			t.Errorf("%s: the super-admin credentials are required", name)
		}
		if name == "pinion-gateway" {
			// The largest body must fit in one NATS message.
			if o := natsOptions(t); cfg.MaxBodyBytes+64<<10 > int(o.MaxPayload) {
				t.Errorf("gateway: PINION_MAX_BODY_BYTES %d does not fit NATS max_payload %d", cfg.MaxBodyBytes, o.MaxPayload)
			}
			// Behind an Ingress every request comes from the controller's
			// address: unless the gateway trusts its X-Forwarded-For, a
			// per-address limit would be one limit for all clients.
			if len(r.ingresses) > 0 && cfg.AuthRateLimit != 0 && len(cfg.TrustedProxies) == 0 {
				t.Error("gateway behind an Ingress: set PINION_TRUSTED_PROXIES to the ingress controller's addresses (or PINION_AUTH_RATE_LIMIT to 0)")
			}
		}
	}
	// The Ingress sends traffic to the gateway's Service port.
	for _, in := range r.ingresses {
		for _, rule := range in.Spec.Rules {
			for _, p := range rule.HTTP.Paths {
				svc := r.services[p.Backend.Service.Name]
				if svc == nil {
					t.Fatalf("ingress %s: no Service %s", in.Name, p.Backend.Service.Name)
				}
				found := false
				for _, sp := range svc.Spec.Ports {
					found = found || sp.Name == p.Backend.Service.Port.Name
				}
				if !found {
					t.Errorf("ingress %s: Service %s has no port %q", in.Name, svc.Name, p.Backend.Service.Port.Name)
				}
			}
		}
	}
}

// containerEnv is what a container's process sees: the keys of its
// ConfigMaps and Secrets (those rendered: the base has no Secrets), then its
// own env (valueFrom references are left out).
func (r *rendered) containerEnv(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil && r.configMaps[from.ConfigMapRef.Name] != nil:
			for k, v := range r.configMaps[from.ConfigMapRef.Name].Data {
				env[k] = v
			}
		case from.SecretRef != nil && r.secrets[from.SecretRef.Name] != nil:
			s := r.secrets[from.SecretRef.Name]
			for k, v := range s.Data {
				env[k] = string(v)
			}
			for k, v := range s.StringData {
				env[k] = v
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

// checkWorkloads holds every workload to the rules, in the base and in an
// overlay (complete: every referenced ConfigMap and Secret exists).
func checkWorkloads(t *testing.T, r *rendered, complete bool) {
	t.Helper()
	var names []string
	for name := range r.deployments {
		names = append(names, strings.TrimPrefix(name, "pinion-"))
	}
	slices.Sort(names)
	if !slices.Equal(names, pinionBinaries) {
		t.Fatalf("Deployments %v, want pinion-%v", names, pinionBinaries)
	}
	for name, d := range r.deployments {
		t.Run(name, func(t *testing.T) {
			checkDeployment(t, r, d, complete)
		})
	}
	checkAutoscalers(t, r)
	checkDisruptionBudgets(t, r)
	checkNetworkPolicies(t, r)
	// Only the gateway has a Service, pointing at its HTTP port.
	for name, svc := range r.services {
		if name != "pinion-gateway" {
			t.Errorf("Service %s: only the gateway takes traffic through a Service", name)
			continue
		}
		gw := r.deployments["pinion-gateway"]
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(gw.Spec.Template.Labels)) {
			t.Error("Service pinion-gateway does not select the gateway's pods")
		}
		for _, p := range svc.Spec.Ports {
			if port(gw.Spec.Template.Spec.Containers[0], p.TargetPort) == 0 {
				t.Errorf("Service pinion-gateway: target port %s is not a container port", p.TargetPort.String())
			}
		}
	}
}

func checkDeployment(t *testing.T, r *rendered, d *appsv1.Deployment, complete bool) {
	pod := d.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Error("the selector does not match the pod template's labels")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken: want false (Pinion never calls the Kubernetes API)")
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks: want false (Service links would add unknown PINION_ variables)")
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("pod securityContext: want runAsNonRoot and a non-zero runAsUser")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod securityContext: want seccompProfile RuntimeDefault")
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
	}
	if len(pod.InitContainers) > 0 || len(pod.Containers) != 1 {
		t.Fatalf("want one container, have %d (and %d init containers)", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	// The image: the binary's own, tagged (pinned by version in an overlay).
	binary := strings.TrimPrefix(d.Name, "pinion-")
	repo, tag, _ := strings.Cut(c.Image, ":")
	if want := makeVar(t, "IMAGE_PREFIX") + binary; repo != want || tag == "" || tag == "latest" {
		t.Errorf("image %s: want %s (make images) with a tag", c.Image, want)
	}
	if complete {
		if err := pinned(c.Image); err != nil {
			t.Error(err)
		}
	}
	// Resources: requests and limits for CPU and memory.
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[res]
		lim, okLim := c.Resources.Limits[res]
		if !okReq || !okLim {
			t.Errorf("%s: want both a request and a limit", res)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s: request %s above limit %s", res, req.String(), lim.String())
		}
	}
	// Security: non-root, no privilege escalation, read-only root, no
	// capabilities.
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot: false")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation: want false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem: want true")
	case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
		t.Error("capabilities: want drop ALL and nothing added")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("privileged")
	}
	for _, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			t.Errorf("volume mount %s: no such volume", m.Name)
		}
	}
	// Environment: only settings the code reads.
	for _, e := range c.Env {
		if !knownVar(e.Name) && !runtimeVars[e.Name] {
			t.Errorf("env %s: not a setting the code reads (pkg/config.Vars)", e.Name)
		}
	}
	for _, from := range c.EnvFrom {
		var keys []string
		switch {
		case from.ConfigMapRef != nil && r.configMaps[from.ConfigMapRef.Name] != nil:
			for k := range r.configMaps[from.ConfigMapRef.Name].Data {
				keys = append(keys, k)
			}
		case from.SecretRef != nil && r.secrets[from.SecretRef.Name] != nil:
			for k := range r.secrets[from.SecretRef.Name].Data {
				keys = append(keys, k)
			}
			for k := range r.secrets[from.SecretRef.Name].StringData {
				keys = append(keys, k)
			}
		case complete:
			t.Errorf("envFrom %+v: no such ConfigMap or Secret", from)
		}
		for _, k := range keys {
			if !knownVar(k) {
				t.Errorf("envFrom key %s: not a setting the code reads (pkg/config.Vars)", k)
			}
		}
	}
	env := r.containerEnv(c)
	// Streams and buckets live on as many NATS servers as the chart runs.
	if want := natsClusterReplicas(t); env["PINION_NATS_REPLICAS"] != strconv.Itoa(want) {
		t.Errorf("PINION_NATS_REPLICAS %q: want %d, the NATS cluster's servers (deploy/k8s/nats/values.yaml)", env["PINION_NATS_REPLICAS"], want)
	}
	// Probes: every process has an HTTP port to probe now (the gateway's,
	// and the admin port, PINION_ADMIN_ADDR, of every process).
	for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", kind)
			continue
		}
		n := port(c, p.HTTPGet.Port)
		if n == 0 {
			t.Errorf("%s probe: port %s is not a container port", kind, p.HTTPGet.Port.String())
			continue
		}
		// The probed port is where the process listens.
		var listen []string
		for _, v := range []string{"PINION_ADDR", "PINION_ADMIN_ADDR"} {
			if _, p, err := net.SplitHostPort(env[v]); err == nil {
				listen = append(listen, p)
			}
		}
		if !slices.Contains(listen, strconv.Itoa(int(n))) {
			t.Errorf("%s probe: port %d is neither PINION_ADDR's nor PINION_ADMIN_ADDR's (%v)", kind, n, listen)
		}
		if want := "/livez"; kind == "readiness" && binary == "gateway" && p.HTTPGet.Path != "/readyz" {
			t.Errorf("readiness probe %s: the gateway's is /readyz", p.HTTPGet.Path)
		} else if kind != "readiness" && p.HTTPGet.Path != want {
			t.Errorf("%s probe %s, want %s", kind, p.HTTPGet.Path, want)
		}
	}
}

// port resolves a probe's or Service's port against the container's ports.
func port(c corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	return 0
}

func checkAutoscalers(t *testing.T, r *rendered) {
	t.Helper()
	scaled := map[string]bool{}
	for _, h := range r.hpas {
		ref := h.Spec.ScaleTargetRef
		d := r.deployments[ref.Name]
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || d == nil {
			t.Errorf("HPA %s: target %s/%s %s does not exist", h.Name, ref.APIVersion, ref.Kind, ref.Name)
			continue
		}
		scaled[ref.Name] = true
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("HPA %s: minReplicas below 2 leaves no instance during a restart", h.Name)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("Deployment %s sets replicas although HPA %s owns the count", d.Name, h.Name)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
				t.Errorf("HPA %s scales on CPU but %s requests none", h.Name, c.Name)
			}
		}
	}
	for _, name := range []string{"pinion-gateway", "pinion-botexec"} {
		if !scaled[name] {
			t.Errorf("no HorizontalPodAutoscaler for %s", name)
		}
	}
	for name, d := range r.deployments {
		if !scaled[name] && (d.Spec.Replicas == nil || *d.Spec.Replicas < 2) {
			t.Errorf("Deployment %s: fewer than 2 replicas", name)
		}
	}
}

func checkDisruptionBudgets(t *testing.T, r *rendered) {
	t.Helper()
	covered := map[string]int{}
	for _, b := range r.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("PDB %s: bad or empty selector", b.Name)
			continue
		}
		matched := 0
		for name, d := range r.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				matched++
				covered[name]++
			}
		}
		if matched != 1 {
			t.Errorf("PDB %s selects the pods of %d Deployments, want 1", b.Name, matched)
		}
		if b.Spec.MinAvailable != nil && b.Spec.MinAvailable.IntValue() >= 2 {
			t.Errorf("PDB %s: minAvailable %s blocks every drain at 2 replicas", b.Name, b.Spec.MinAvailable.String())
		}
	}
	for name := range r.deployments {
		if covered[name] != 1 {
			t.Errorf("Deployment %s is covered by %d PodDisruptionBudgets, want 1", name, covered[name])
		}
	}
}

// checkNetworkPolicies: everything denied by default; ingress only to the
// gateway's HTTP port and to admin ports; egress to DNS, NATS and (for
// services) MongoDB.
func checkNetworkPolicies(t *testing.T, r *rendered) {
	t.Helper()
	selects := func(np *networkingv1.NetworkPolicy, d *appsv1.Deployment) bool {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		return err == nil && sel.Matches(labels.Set(d.Spec.Template.Labels))
	}
	for name, d := range r.deployments {
		denyAll := false
		egress := map[int32]bool{}
		for _, np := range r.policies {
			if !selects(np, d) {
				continue
			}
			types := np.Spec.PolicyTypes
			if slices.Contains(types, networkingv1.PolicyTypeIngress) && slices.Contains(types, networkingv1.PolicyTypeEgress) &&
				len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 {
				denyAll = true
			}
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					if p.Port == nil || !(p.Port.IntVal == 9090 || (name == "pinion-gateway" && p.Port.IntVal == 8103)) {
						t.Errorf("NetworkPolicy %s lets %s accept %v", np.Name, name, p.Port)
					}
				}
				if len(rule.Ports) == 0 {
					t.Errorf("NetworkPolicy %s lets %s accept any port", np.Name, name)
				}
			}
			for _, rule := range np.Spec.Egress {
				for _, p := range rule.Ports {
					if p.Port != nil {
						egress[p.Port.IntVal] = true
					}
				}
			}
		}
		if !denyAll {
			t.Errorf("%s: no default-deny NetworkPolicy selects it", name)
		}
		want := []int32{53, 4222}
		if name != "pinion-gateway" {
			want = append(want, 27017)
		}
		for _, p := range want {
			if !egress[p] {
				t.Errorf("%s: no NetworkPolicy allows egress to port %d", name, p)
			}
		}
	}
}

// natsClusterReplicas is how many servers the NATS chart's values run.
func natsClusterReplicas(t *testing.T) int {
	t.Helper()
	root, err := deployfiles.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "k8s", "nats", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Config struct {
			Cluster struct {
				Enabled  bool `json:"enabled"`
				Replicas int  `json:"replicas"`
			} `json:"cluster"`
		} `json:"config"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if !v.Config.Cluster.Enabled {
		return 1
	}
	return v.Config.Cluster.Replicas
}
