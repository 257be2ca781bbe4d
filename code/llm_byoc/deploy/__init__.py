"""Deploy the image to SageMaker with boto3: ECR, S3 packaging, endpoints, autoscaling.

``python -m llm_byoc.deploy --help``; the guide is ``deploy/README.md``.
"""
