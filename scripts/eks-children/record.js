// Constructs pulumi-eks's `Cluster` with its own implementation, under the Node SDK's mocks, the way
// the eks plugin's `construct` does, and prints every registration it makes as one JSON document.
//
//   node record.js <built nodejs/eks dir> <request.json>
//
// request.json: {project, stack, name, type, parent, protect, inputs, mode}. `inputs` are the
// component's inputs as the Python program sent them (the engine's wire form: secrets and the
// unknown sentinel still marked); `mode` is "known" (every resource reports an id and computed
// outputs, as after `up`) or "first-preview" (no resource exists yet: ids and computed outputs are
// unknown, as a first `pulumi preview` has them).
// Driven by llm_pd_eks_tools/maint/gen_eks_children.py (`make eks-children`); nothing here is project code.
"use strict";
const path = require("path");
const fs = require("fs");

const [implDir, requestFile] = process.argv.slice(2);
const fromImpl = (m) => require(path.join(implDir, "node_modules", m));
const pulumi = fromImpl("@pulumi/pulumi");
const mocks = fromImpl("@pulumi/pulumi/runtime/mocks");
const rpc = fromImpl("@pulumi/pulumi/runtime/rpc");
const settings = fromImpl("@pulumi/pulumi/runtime/settings");
const server = fromImpl("@pulumi/pulumi/provider/server");
const resource = fromImpl("@pulumi/pulumi/resource");
const structproto = fromImpl("google-protobuf/google/protobuf/struct_pb");

// The one network read of the implementation: the OIDC issuer's CA thumbprint, fetched over TLS once
// the issuer URL is known (nodejs/eks/cluster/cert-thumprint.ts). Offline, a fixed 40-hex value.
const thumbprint = require(path.join(implDir, "bin", "cluster", "cert-thumprint"));
thumbprint.getIssuerCAThumbprint = (issuerUrl) => pulumi.output(issuerUrl).apply(() => "0".repeat(40));

const request = JSON.parse(fs.readFileSync(requestFile, "utf8"));
const known = request.mode === "known";
const region = request.region;
const account = "123456789012";

const registrations = [];
const invokes = [];

// Every RegisterResource the implementation sends, with the options the engine receives.
const register = mocks.MockMonitor.prototype.registerResource;
mocks.MockMonitor.prototype.registerResource = function (req, callback) {
    const timeouts = req.getCustomtimeouts();
    const entry = {
        type: req.getType(),
        name: req.getName(),
        parent: req.getParent(),
        custom: req.getCustom(),
        protect: req.hasProtect() ? req.getProtect() : null,
        provider: req.getProvider(),
        version: req.getVersion(),
        object: req.getObject() ? req.getObject().toJavaScript() : {},
        dependencies: req.getDependenciesList(),
        propertyDependencies: Object.fromEntries(
            req.getPropertydependenciesMap().toArray().map(([k, v]) => [k, v[0]]),
        ),
        ignoreChanges: req.getIgnorechangesList(),
        replaceOnChanges: req.getReplaceonchangesList(),
        deleteBeforeReplace: req.getDeletebeforereplace(),
        deleteBeforeReplaceDefined: req.getDeletebeforereplacedefined(),
        additionalSecretOutputs: req.getAdditionalsecretoutputsList(),
        aliasSpecs: req.getAliasesList().map((a) => a.toObject()),
        aliasURNs: req.getAliasurnsList(),
        customTimeouts: timeouts ? timeouts.toObject() : null,
        retainOnDelete: req.hasRetainondelete() ? req.getRetainondelete() : null,
        deletedWith: req.getDeletedwith(),
    };
    registrations.push(entry);
    return register.call(this, req, (error, response) => {
        entry.id = response ? response.getId() : "";
        callback(error, response);
    });
};

// Computed outputs a provider reports once a resource exists ("known" mode only).
function computed(type, name, inputs) {
    const arnName = inputs.name || name;
    switch (type) {
        case "aws:iam/role:Role":
            return { arn: `arn:aws:iam::${account}:role/${arnName}`, name: arnName, uniqueId: `AROA${name}` };
        case "aws:eks/cluster:Cluster": {
            const issuer = `https://oidc.eks.${region}.amazonaws.com/id/MOCK${name.length}`;
            return {
                arn: `arn:aws:eks:${region}:${account}:cluster/${arnName}`,
                name: arnName,
                endpoint: `https://MOCK.gr7.${region}.eks.amazonaws.com`,
                certificateAuthority: { data: "bW9jaw==" },
                identities: [{ oidcs: [{ issuer }] }],
                vpcConfig: { ...(inputs.vpcConfig || {}), clusterSecurityGroupId: "sg-0mockeks" },
            };
        }
        case "aws:iam/openIdConnectProvider:OpenIdConnectProvider":
            return { arn: `arn:aws:iam::${account}:oidc-provider/${(inputs.url || "").replace("https://", "")}` };
        default:
            return { arn: `arn:aws:mock:${region}:${account}:${type.split(":").pop()}/${name}` };
    }
}

pulumi.runtime.setMocks(
    {
        newResource(args) {
            if (!args.custom) return { id: undefined, state: {} };
            if (!known) return { id: undefined, state: args.inputs };
            const id = args.type.startsWith("pulumi:providers:") ? `${args.name}-id` : args.inputs.name || `${args.name}-id`;
            return { id, state: { ...args.inputs, ...computed(args.type, args.name, args.inputs) } };
        },
        call(args) {
            invokes.push(args.token);
            switch (args.token) {
                case "aws:index/getPartition:getPartition":
                    return { partition: "aws", dnsSuffix: "amazonaws.com", id: "aws" };
                case "aws:index/getRegion:getRegion":
                    return { name: region, region, id: region };
                case "aws:index/getCallerIdentity:getCallerIdentity":
                    return { accountId: account, arn: `arn:aws:iam::${account}:role/deploy`, userId: "mock", id: account };
                default:
                    return {};
            }
        },
    },
    request.project,
    request.stack,
    true,
);

async function main() {
    const inputs = await server.deserializeInputs(structproto.Struct.fromJavaScript(request.inputs), new Map());
    const opts = {
        parent: request.parent ? new resource.DependencyResource(request.parent) : undefined,
        protect: request.protect,
        dependsOn: [],
        providers: {},
        aliases: [],
        ignoreChanges: [],
        replaceOnChanges: [],
    };
    const provider = require(path.join(implDir, "bin", "cmd", "provider", "cluster")).clusterProviderFactory();
    const result = await provider.construct(request.name, request.type, inputs, opts);
    // What construct sends back: serializing the state waits for every output, as the plugin does.
    await rpc.serializeResourceProperties(`construct(${request.type}, ${request.name})`, result.state);
    await settings.waitForRPCs();
    process.stdout.write(JSON.stringify({ registrations, invokes: [...new Set(invokes)].sort() }));
}

main().catch((error) => {
    process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
    process.exit(1);
});
